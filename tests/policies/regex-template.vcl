# Imitates: the long-regex style of the widely forked "Varnish 6
# template" repositories and hosting-company defaults (the
# varnish-6.0-configuration-templates lineage, cPanel/Plesk Varnish
# add-ons): long alternations for static extensions, bot User-Agents,
# tracking parameters and cookie names; case-insensitive (?i) matches,
# anchored [^?]* paths, regsuball chains that scrub Cookie by name with
# "(^|;\s*)" prefixes, look-ahead to keep the first parameter's "?", a
# back-reference normalising doubled slashes, the query sorted,
# Accept-Encoding normalised, pass for admin paths from a long list, and
# X-Cacheable explaining each decision. Our own writing.
vcl 4.1;

import std;

backend default {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

sub vcl_recv {
    set req.http.X-Cacheable = "yes";
    set req.url = regsuball(req.url, "([^:])//+", "\1/");
    if (req.url ~ "(?i)[?&](utm_(source|medium|campaign|content|term|id)|gclid|gclsrc|dclid|fbclid|msclkid|mc_(cid|eid)|_hsenc|_hsmi|hsCtaTracking|mkt_tok|yclid|igshid|_ke|ref_src|oly_(anon|enc)_id|vero_(conv|id)|wickedid|trk_[a-z]+)=") {
        set req.url = regsuball(req.url, "(?i)(?<=[?&])(utm_(source|medium|campaign|content|term|id)|gclid|gclsrc|dclid|fbclid|msclkid|mc_(cid|eid)|_hsenc|_hsmi|hsCtaTracking|mkt_tok|yclid|igshid|_ke|ref_src|oly_(anon|enc)_id|vero_(conv|id)|wickedid|trk_[a-z]+)=[^&]*&?", "");
        set req.url = regsub(req.url, "[?&]+$", "");
    }
    set req.url = regsub(req.url, "\?(?=&)&+", "?");
    set req.url = std.querysort(req.url);
    if (req.http.User-Agent ~ "(?i)(googlebot|bingbot|slurp|duckduckbot|baiduspider|yandex(bot)?|sogou|exabot|facebot|facebookexternalhit|ia_archiver|ahrefsbot|semrushbot|mj12bot|dotbot|petalbot|applebot)") {
        set req.http.X-Bot = "1";
    }
    if (req.method !~ "^(GET|HEAD|PUT|POST|TRACE|OPTIONS|PATCH|DELETE|PURGE|BAN|REFRESH)$") {
        return (pipe);
    }
    if (req.method != "GET" && req.method != "HEAD") {
        set req.http.X-Cacheable = "no: method";
        return (pass);
    }
    if (req.url ~ "(?i)^/(wp-(admin|login|cron|json/wp/v2/users)|administrator|admin|user|account|login|logout|register|cart|checkout|my-account|phpmyadmin|cgi-bin|xmlrpc\.php|feed|\.well-known/acme-challenge)") {
        set req.http.X-Cacheable = "no: path";
        return (pass);
    }
    if (req.url ~ "(?i)^[^?]*\.(7z|avi|avif|bmp|bz2|css|csv|doc|docx|eot|flac|flv|gif|gz|ico|jpeg|jpg|js|json|less|map|mka|mkv|mov|mp3|mp4|mpeg|mpg|odt|ogg|ogm|opus|otf|pdf|png|ppt|pptx|rar|rtf|svg|svgz|swf|tar|tbz|tgz|ttf|txt|txz|wav|webm|webp|woff|woff2|xls|xlsx|xml|xz|zip)(\?.*)?$") {
        unset req.http.Cookie;
        set req.http.X-Cacheable = "yes: static";
        return (hash);
    }
    if (req.http.Accept-Encoding) {
        if (req.http.Accept-Encoding ~ "(?i)\bgzip\b") {
            set req.http.Accept-Encoding = "gzip";
        } elsif (req.http.Accept-Encoding ~ "(?i)\bdeflate\b") {
            set req.http.Accept-Encoding = "deflate";
        } else {
            unset req.http.Accept-Encoding;
        }
    }
    if (req.http.Cookie) {
        set req.http.Cookie = regsuball(req.http.Cookie, "(^|;\s*)(_[_a-z]+|has_js|__utm[a-z]+|_ga[_a-z0-9]*|_gid|_gat[_a-z0-9]*|_fbp|_fbc|_hj[a-zA-Z]+|_pk_(id|ses|ref)[.a-z0-9]*|__gads|__qca|_clck|_clsk|_uetsid|_uetvid|cookielawinfo-[a-z0-9-]+|CookieConsent|viewed_cookie_policy)=[^;]*", "");
        set req.http.Cookie = regsub(req.http.Cookie, "^;\s*", "");
        if (req.http.Cookie ~ "^\s*$") {
            unset req.http.Cookie;
        }
    }
    if (req.http.Authorization) {
        set req.http.X-Cacheable = "no: authorization";
        return (pass);
    }
    if (req.http.Cookie ~ "(?i)(wordpress_(logged_in|sec)_[a-f0-9]+|wp-postpass|comment_author_[a-f0-9]+|woocommerce_items_in_cart|PHPSESSID|SESS[a-f0-9]+|be_typo_user|__ac|X-Magento-Vary)=") {
        set req.http.X-Cacheable = "no: session cookie";
        return (pass);
    }
    unset req.http.Cookie;
    return (hash);
}

sub vcl_backend_response {
    if (bereq.url ~ "(?i)^[^?]*\.(css|js|json|map|gif|ico|jpe?g|png|svg|webp|avif|woff2?|ttf|eot|otf)(\?.*)?$") {
        unset beresp.http.Set-Cookie;
        set beresp.ttl = 1d;
    }
    if (bereq.url ~ "(?i)^[^?]*\.(7z|avi|bz2|flac|flv|gz|mka|mkv|mov|mp3|mp4|mpeg|mpg|ogg|ogm|opus|rar|tar|tgz|tbz|txz|wav|webm|xz|zip)(\?.*)?$") {
        unset beresp.http.Set-Cookie;
        set beresp.do_stream = true;
    }
    if (beresp.http.Cache-Control ~ "(?i)(private|no-cache|no-store)" || beresp.http.Set-Cookie) {
        set beresp.http.X-Cacheable = "no: backend said so";
        set beresp.ttl = 120s;
        set beresp.uncacheable = true;
        return (deliver);
    }
    if (beresp.status == 301 || beresp.status == 302) {
        set beresp.http.Location = regsub(beresp.http.Location, ":[0-9]+(?=/)", "");
    }
    set beresp.grace = 6h;
}

sub vcl_deliver {
    if (resp.http.X-Cacheable) {
        set req.http.X-Cacheable = resp.http.X-Cacheable;
    }
    set resp.http.X-Cacheable = req.http.X-Cacheable;
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
    } else {
        set resp.http.X-Cache = "MISS";
    }
    unset resp.http.X-Powered-By;
    unset resp.http.Server;
}
