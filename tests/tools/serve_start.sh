# serve_start.sh - sourced by scripts that run `lynn serve` in the background:
# serve_start ARGS... starts ./lynn serve --port 0 ARGS, waits for its
# "listening on" line and sets serve_pid, serve_port and serve_err (its
# stderr file); serve_stop sends SIGTERM, waits for the drain and removes
# the file. serve_start returns 1 (server stopped) if no port shows.
serve_start() {
	serve_err=$(mktemp)
	./lynn serve --port 0 "$@" 2>"$serve_err" &
	serve_pid=$!
	serve_port=""
	for _i in $(seq 1 200); do
		serve_port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$serve_err")
		[ -n "$serve_port" ] && return 0
		kill -0 "$serve_pid" 2>/dev/null || break
		sleep 0.1
	done
	cat "$serve_err" >&2
	serve_stop
	return 1
}

serve_stop() {
	kill -TERM "$serve_pid" 2>/dev/null || true
	wait "$serve_pid" || true
	rm -f "$serve_err"
}
