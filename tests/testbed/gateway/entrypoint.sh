#!/bin/sh
# TEST DOUBLE: render nginx's configuration from the environment, then run nginx in the foreground.
#   GATEWAY_UPSTREAM  the vLLM server (test double) behind the gateway, e.g. http://127.0.0.1:8001 (required)
#   GATEWAY_API_KEY   the one key the gateway accepts as `Authorization: Bearer <key>` (required)
#   GATEWAY_LISTEN    address:port nginx listens on (default 127.0.0.1:8080; use with `docker run --network host`)
#   GATEWAY_PREFIX    the gateway's base path (default /api): PREFIX/v1/... goes to the upstream's /v1/...
# Any argument replaces nginx: `docker run ... a800-testbed/gateway-standin:latest cat /etc/nginx/nginx.conf`
# shows the rendered configuration.
set -eu
: "${GATEWAY_UPSTREAM:?set GATEWAY_UPSTREAM (e.g. http://127.0.0.1:8001)}"
: "${GATEWAY_API_KEY:?set GATEWAY_API_KEY}"
listen=${GATEWAY_LISTEN:-127.0.0.1:8080}
prefix=${GATEWAY_PREFIX:-/api}
upstream=${GATEWAY_UPSTREAM%/}
# The key goes into a quoted nginx string: keep it to characters that need no escaping there.
case "$GATEWAY_API_KEY" in
  *[!A-Za-z0-9._~+/=-]*) echo "gateway-standin: GATEWAY_API_KEY may hold only A-Za-z0-9._~+/=- characters" >&2; exit 2 ;;
esac
cat > /etc/nginx/nginx.conf <<CONF
# Rendered by gateway-standin (TEST DOUBLE) from its environment at container start.
worker_processes 1;
pid /tmp/gateway-standin.pid;
error_log stderr warn;
daemon off;
events { worker_connections 256; }
http {
    access_log /dev/stdout;
    default_type application/json;
    server_tokens off;
    client_body_temp_path /tmp/nginx-body;
    proxy_temp_path /tmp/nginx-proxy;
    server {
        listen ${listen};
        location ${prefix}/v1/ {
            # The Authorization header must be exactly "Bearer <key>" (nginx drops whitespace at the end of a
            # header value, not inside it: a key with a leading space, or quotes around it, is another key).
            if (\$http_authorization = "") {
                return 401 '{"error": {"message": "Missing API key: send Authorization: Bearer <key>", "type": "authentication_error", "param": null, "code": "missing_api_key"}}\n';
            }
            if (\$http_authorization != "Bearer ${GATEWAY_API_KEY}") {
                return 401 '{"error": {"message": "Invalid API key", "type": "authentication_error", "param": null, "code": "invalid_api_key"}}\n';
            }
            proxy_pass ${upstream}/v1/;
            proxy_set_header Authorization "";
            proxy_http_version 1.1;
            proxy_buffering off;
            proxy_read_timeout 600s;
        }
        location / {
            return 404 '{"error": {"message": "Not found: \$uri", "type": "not_found_error", "param": null, "code": 404}}\n';
        }
    }
}
CONF
if [ "$#" -gt 0 ]; then exec "$@"; fi
exec nginx -c /etc/nginx/nginx.conf
