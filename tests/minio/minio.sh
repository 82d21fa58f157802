#!/usr/bin/env bash
# A throwaway MinIO server (a real S3 implementation) on 127.0.0.1 for the
# object-tier tests (docs/design.md section 5n).
#
#   tests/minio/minio.sh start [DIR]   start it; print `export` lines for
#                                      TERRACE_S3_URL, AWS_ACCESS_KEY_ID,
#                                      AWS_SECRET_ACCESS_KEY, AWS_REGION
#   tests/minio/minio.sh stop [DIR]    stop it and remove its data
#   tests/minio/minio.sh env [DIR]     print the export lines again
#   tests/minio/minio.sh kill [DIR]    SIGKILL it (a crash), keeping its data
#   tests/minio/minio.sh restart [DIR] start it again after kill: the same
#                                      address, keys and data
#
# DIR (default $TERRACE_MINIO_DIR, else /tmp/terrace-minio) holds the data,
# the log, the pid and the export lines; start refuses a DIR whose server is
# still running. Usage: eval "$(tests/minio/minio.sh start)".
#
# The binary is $MINIO, else `minio` on PATH, else ~/go/bin/minio, which is
# built from its Go module when missing (`go install`, 3-5 minutes on two
# cores). Ports are free ones picked by the kernel; the keys are random and
# live only in DIR/env, which stop deletes.
set -euo pipefail

cmd=${1:-}
dir=${2:-${TERRACE_MINIO_DIR:-/tmp/terrace-minio}}
bucket=${TERRACE_MINIO_BUCKET:-terrace-test}
region=us-east-1

log() { echo "minio.sh: $*" >&2; }
die() { log "$*"; exit 1; }

running() { [[ -f $dir/pid ]] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; }

find_minio() {
    if [[ -n ${MINIO:-} ]]; then echo "$MINIO"; return; fi
    if command -v minio >/dev/null 2>&1; then command -v minio; return; fi
    local gobin
    gobin=$(go env GOBIN 2>/dev/null || true)
    [[ -n $gobin ]] || gobin="$(go env GOPATH 2>/dev/null || echo "$HOME/go")/bin"
    if [[ ! -x $gobin/minio ]]; then
        command -v go >/dev/null 2>&1 || die "no minio binary and no go to build it"
        log "building MinIO: go install github.com/minio/minio@latest (a few minutes)"
        go install github.com/minio/minio@latest >&2 || die "go install github.com/minio/minio@latest failed"
    fi
    echo "$gobin/minio"
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# Runs the server of $dir/server (binary, ports, keys) on $dir/data and
# waits until it is live; fails (status 1) when the server exits at start
# (e.g. a port another process took since free_port saw it free).
launch() {
    local bin port cport key secret url
    read -r bin port cport key secret <"$dir/server"
    MINIO_ROOT_USER=$key MINIO_ROOT_PASSWORD=$secret MINIO_BROWSER=off \
        MINIO_UPDATE=off MINIO_CI_CD=1 \
        nohup "$bin" server "$dir/data" --address "127.0.0.1:$port" \
        --console-address "127.0.0.1:$cport" --quiet >>"$dir/log" 2>&1 &
    echo $! >"$dir/pid"
    url="http://127.0.0.1:$port"
    local i
    for i in $(seq 1 600); do
        if curl -fsS -o /dev/null "$url/minio/health/live" 2>/dev/null; then break; fi
        running || return 1
        sleep 0.1
    done
    curl -fsS -o /dev/null "$url/minio/health/live" || { stop; die "minio not live after 60 s"; }
}

start() {
    running && die "a server from $dir is still running (pid $(cat "$dir/pid")): run stop first"
    local bin port cport key secret url
    bin=$(find_minio)
    mkdir -p "$dir"
    rm -rf "$dir/data"
    mkdir -p "$dir/data"
    key="terrace$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
    secret="$(od -An -N18 -tx1 /dev/urandom | tr -d ' \n')"
    local attempt
    for attempt in 1 2 3; do
        port=$(free_port)
        cport=$(free_port)
        url="http://127.0.0.1:$port"
        (umask 077; echo "$bin $port $cport $key $secret" >"$dir/server")
        : >"$dir/log"
        launch && break
        if [[ $attempt == 3 ]]; then
            cat "$dir/log" >&2
            die "minio exited at start, 3 times (log above)"
        fi
        log "minio exited at start (a port taken since it was picked?); trying other ports"
    done
    curl -fsS -o /dev/null -X PUT --aws-sigv4 "aws:amz:$region:s3" --user "$key:$secret" "$url/$bucket" \
        || { stop; die "could not create bucket $bucket"; }
    cat >"$dir/env" <<ENV
export TERRACE_S3_URL=$url/$bucket
export AWS_ACCESS_KEY_ID=$key
export AWS_SECRET_ACCESS_KEY=$secret
export AWS_REGION=$region
ENV
    log "MinIO $($bin --version 2>/dev/null | head -1 | awk '{print $3}') at $url (pid $(cat "$dir/pid")), bucket $bucket, data in $dir/data"
    cat "$dir/env"
}

stop() {
    if running; then
        local pid
        pid=$(cat "$dir/pid")
        kill "$pid"
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
        log "stopped pid $pid"
    fi
    rm -rf "$dir/data" "$dir/pid" "$dir/env" "$dir/server"
}

crash() {
    running || die "no server of $dir is running"
    local pid
    pid=$(cat "$dir/pid")
    kill -9 "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    log "killed pid $pid (SIGKILL); data kept in $dir/data"
}

restart() {
    running && die "a server from $dir is still running (pid $(cat "$dir/pid"))"
    [[ -f $dir/server ]] || die "no server was started in $dir"
    launch || { cat "$dir/log" >&2; die "minio exited at restart (log above)"; }
    log "restarted (pid $(cat "$dir/pid")) on the same address and data"
}

case $cmd in
start) start ;;
stop) stop ;;
env) [[ -f $dir/env ]] && cat "$dir/env" || die "no server started in $dir" ;;
kill) crash ;;
restart) restart ;;
*) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
