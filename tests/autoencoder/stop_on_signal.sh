#!/bin/sh
# A training app sent SIGINT or SIGTERM once its first progress line ("step ...") is in LOG must
# stop with status 128 + the signal and leave every OUTPUT written (a CSV with data rows). LOG is
# a file, so the line reaches it mid-run only if the app flushes it.
# Usage: stop_on_signal.sh INT|TERM LOG OUTPUT... -- app args...
set -u
sig=$1 log=$2
shift 2
outputs=
while [ "$1" != "--" ]; do
  outputs="$outputs $1"
  shift
done
shift
rm -f "$log" $outputs
# A shell without job control starts background jobs with SIGINT ignored, and the apps leave an
# inherited ignore alone (as nohup expects): perl restores the default for the app.
perl -e '$SIG{INT} = "DEFAULT"; exec @ARGV or die "exec $ARGV[0]: $!\n"' "$@" >"$log" 2>&1 &
pid=$!
tries=0
until grep -q '^step' "$log" 2>/dev/null; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "the app ended before printing a step:"
    cat "$log"
    exit 1
  fi
  tries=$((tries + 1))
  if [ "$tries" -gt 600 ]; then
    kill -KILL "$pid"
    echo "no progress line in 60 s:"
    cat "$log"
    exit 1
  fi
  sleep 0.1
done
kill -"$sig" "$pid"
wait "$pid"
rc=$?
cat "$log"
case $sig in
INT) want=130 ;;
TERM) want=143 ;;
*) want=unknown ;;
esac
if [ "$rc" != "$want" ]; then
  echo "exit status $rc, expected $want"
  exit 1
fi
for f in $outputs; do
  if [ ! -s "$f" ]; then
    echo "$f: missing or empty"
    exit 1
  fi
  case $f in
  *.csv)
    if [ "$(wc -l <"$f")" -lt 2 ]; then
      echo "$f: no data rows"
      exit 1
    fi
    ;;
  esac
done
echo "stopped by SIG$sig with status $rc; wrote$outputs"
