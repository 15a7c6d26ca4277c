# Imitates: the geo and cookie-consent VCLs European publishers run
# (GDPR consent variants behind a CDN that sets a country header): vmod
# cookie reading the consent cookie (CookieConsent/OptanonConsent style)
# into X-Consent (all, necessary, unknown), the country from a CDN header
# or "XX", both sent to the backend, added to Vary on the way in and
# rewritten to Cookie on the way out so browsers and downstream caches
# do not cache a variant, analytics cookies dropped when consent is
# missing, X-Geo-Country echoed for debugging. Our own writing.
vcl 4.1;

import cookie;
import std;

backend publisher {
    .host = "${backend_host}";
    .port = "${backend_port}";
}

sub vcl_recv {
    if (req.http.CF-IPCountry) {
        set req.http.X-Geo-Country = std.toupper(req.http.CF-IPCountry);
    } elsif (req.http.X-Country-Code) {
        set req.http.X-Geo-Country = std.toupper(req.http.X-Country-Code);
    } else {
        set req.http.X-Geo-Country = "XX";
    }
    if (req.http.X-Geo-Country ~ "^(AT|BE|BG|CY|CZ|DE|DK|EE|ES|FI|FR|GR|HR|HU|IE|IT|LT|LU|LV|MT|NL|PL|PT|RO|SE|SI|SK|GB|NO|IS|LI|CH)$") {
        set req.http.X-Geo-Region = "eea";
    } else {
        set req.http.X-Geo-Region = "world";
    }
    cookie.parse(req.http.Cookie);
    if (cookie.get("CookieConsent") ~ "statistics:true" || cookie.get("OptanonConsent") ~ "C0002:1") {
        set req.http.X-Consent = "all";
    } elsif (cookie.isset("CookieConsent") || cookie.isset("OptanonConsent")) {
        set req.http.X-Consent = "necessary";
    } else {
        set req.http.X-Consent = "unknown";
    }
    if (req.http.X-Consent != "all") {
        cookie.filter_re("^(_ga.*|_gid|_gat|__utm.|_fbp|_hj.*)$");
    }
    set req.http.Cookie = cookie.get_string();
    if (req.http.Cookie == "") {
        unset req.http.Cookie;
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    if (req.http.Authorization || req.http.Cookie ~ "(PHPSESSID|wordpress_logged_in)") {
        return (pass);
    }
    unset req.http.Cookie;
    return (hash);
}

sub vcl_backend_response {
    if (beresp.http.Content-Type ~ "text/html") {
        if (beresp.http.Vary) {
            set beresp.http.Vary = beresp.http.Vary + ", X-Consent, X-Geo-Region";
        } else {
            set beresp.http.Vary = "X-Consent, X-Geo-Region";
        }
    }
}

sub vcl_deliver {
    if (resp.http.Vary ~ "X-Consent") {
        set resp.http.Vary = regsuball(resp.http.Vary, "(X-Consent|X-Geo-Region)", "Cookie");
        set resp.http.Vary = regsub(resp.http.Vary, "Cookie, Cookie", "Cookie");
    }
    set resp.http.X-Geo-Country = req.http.X-Geo-Country;
    set resp.http.X-Consent = req.http.X-Consent;
}
