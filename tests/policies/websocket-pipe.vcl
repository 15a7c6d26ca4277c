# Imitates: the websocket sections of Varnish's own documentation
# ("Using Websockets") and the chat/Socket.IO/Mercure VCLs built on it:
# an Upgrade: websocket request piped with Upgrade and Connection copied
# onto the backend request in vcl_pipe, the socket.io long-polling paths
# passed, unknown methods piped with "Connection: close", the pipe
# backend chosen by path, everything else cached by the builtin rules
# with Server-Sent Events never buffered (do_stream, uncacheable).
# Our own writing.
vcl 4.1;

backend web {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

backend sockets {
    .host = "${backend_host}";
    .port = "${backend_port}";
    .first_byte_timeout = 3600s;
    .between_bytes_timeout = 3600s;
}

sub vcl_recv {
    if (req.http.Upgrade ~ "(?i)websocket") {
        set req.backend_hint = sockets;
        return (pipe);
    }
    if (req.url ~ "^/(socket\.io|sockjs|\.well-known/mercure)/") {
        set req.backend_hint = sockets;
        return (pass);
    }
    if (req.method !~ "^(GET|HEAD|PUT|POST|TRACE|OPTIONS|DELETE|PATCH|PURGE|BAN|REFRESH)$") {
        return (pipe);
    }
    if (req.method == "PURGE" || req.method == "BAN" || req.method == "REFRESH") {
        return (synth(405, "Method Not Allowed"));
    }
}

sub vcl_pipe {
    if (req.http.Upgrade) {
        set bereq.http.Upgrade = req.http.Upgrade;
        set bereq.http.Connection = req.http.Connection;
    } else {
        set bereq.http.Connection = "close";
    }
}

sub vcl_backend_response {
    if (beresp.http.Content-Type ~ "text/event-stream") {
        set beresp.do_stream = true;
        set beresp.uncacheable = true;
        return (deliver);
    }
}

sub vcl_synth {
    if (resp.status == 405) {
        set resp.http.Allow = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS";
    }
}
