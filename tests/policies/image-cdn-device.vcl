# Imitates: the image-CDN and device-detection VCLs built on Varnish's
# devicedetect.vcl (varnish-devicedetect's "X-UA-Device" recipe) and
# image-resizing front caches: the User-Agent classified into pc,
# mobile-iphone, mobile-android, tablet-ipad, tablet-android, mobile-bot,
# pc-bot with long regex chains, the class sent to the backend and added
# to Vary (and hidden again from the client), WebP negotiated from Accept
# into a normalised header in the hash, Accept-Encoding normalised,
# image answers cached a week with grace, the class in X-UA-Device on
# the response for debugging. Our own writing.
vcl 4.1;

import std;

backend images {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

sub detect_device {
    unset req.http.X-UA-Device;
    set req.http.X-UA-Device = "pc";
    if (req.http.User-Agent ~ "(?i)(ads|google|bing|msn|yandex|baidu|ro|career|seznam|)bot" ||
        req.http.User-Agent ~ "(?i)(baidu|jike|symantec)spider" ||
        req.http.User-Agent ~ "(?i)scanner" ||
        req.http.User-Agent ~ "(?i)(web)crawler") {
        set req.http.X-UA-Device = "bot";
    } elsif (req.http.User-Agent ~ "(?i)ipad") {
        set req.http.X-UA-Device = "tablet-ipad";
    } elsif (req.http.User-Agent ~ "(?i)ip(hone|od)") {
        set req.http.X-UA-Device = "mobile-iphone";
    } elsif (req.http.User-Agent ~ "(?i)android.*(mobile|mini)") {
        set req.http.X-UA-Device = "mobile-android";
    } elsif (req.http.User-Agent ~ "(?i)android 3" ||
             req.http.User-Agent ~ "(?i)android(?!.*mobile)") {
        set req.http.X-UA-Device = "tablet-android";
    } elsif (req.http.User-Agent ~ "(?i)(kindle|silk|playbook|tablet)") {
        set req.http.X-UA-Device = "tablet-other";
    } elsif (req.http.User-Agent ~ "(?i)(opera mini|iemobile|windows phone|blackberry|symbian|palm|mobile)") {
        set req.http.X-UA-Device = "mobile-generic";
    }
    if (req.http.Cookie ~ "(?i)X-UA-Device-force") {
        set req.http.X-UA-Device = regsub(req.http.Cookie, "(?i).*X-UA-Device-force=([^;]+);*.*", "\1");
    }
}

sub vcl_recv {
    call detect_device;
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.http.Accept-Encoding) {
        if (req.url ~ "\.(jpe?g|png|gif|webp|avif)(\?.*)?$") {
            unset req.http.Accept-Encoding;
        } elsif (req.http.Accept-Encoding ~ "gzip") {
            set req.http.Accept-Encoding = "gzip";
        } elsif (req.http.Accept-Encoding ~ "deflate") {
            set req.http.Accept-Encoding = "deflate";
        } else {
            unset req.http.Accept-Encoding;
        }
    }
    if (req.http.Accept ~ "image/webp") {
        set req.http.X-Image-Format = "webp";
    } else {
        set req.http.X-Image-Format = "default";
    }
    unset req.http.Cookie;
    unset req.http.Authorization;
    return (hash);
}

sub vcl_hash {
    if (req.url ~ "\.(jpe?g|png|gif)(\?.*)?$") {
        hash_data(req.http.X-Image-Format);
    }
}

sub vcl_backend_fetch {
    if (bereq.url ~ "^/static/") {
        set bereq.http.X-Device-Class = bereq.http.X-UA-Device;
    }
}

sub vcl_backend_response {
    if (bereq.http.X-UA-Device) {
        if (!beresp.http.Vary) {
            set beresp.http.Vary = "X-UA-Device";
        } elsif (beresp.http.Vary !~ "X-UA-Device") {
            set beresp.http.Vary = beresp.http.Vary + ", X-UA-Device";
        }
    }
    if (beresp.http.Content-Type ~ "^image/") {
        unset beresp.http.Set-Cookie;
        set beresp.ttl = 7d;
        set beresp.grace = 1d;
    }
    set beresp.http.X-UA-Device = bereq.http.X-UA-Device;
}

sub vcl_deliver {
    if ((req.http.X-UA-Device) && (resp.http.Vary)) {
        set resp.http.Vary = regsub(resp.http.Vary, "X-UA-Device", "User-Agent");
    }
}
