#!/usr/bin/env bash
# The kstream demo: a local Kafka broker, the input topic filled from
# topologies/data/words.txt, the checkpointed word-count job, its checkpoints and output.
#
# Everything lives under .kstream/demo (wiped at the start; the demo broker is
# stopped at the end unless KEEP_BROKER=1). Env: KSTREAM (kstream executable,
# default: kstream on PATH), PARTITIONS (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."

KSTREAM=${KSTREAM:-kstream}
PARTITIONS=${PARTITIONS:-3}
DEMO=.kstream/demo
BROKER_DIR=$DEMO/kafka

"$KSTREAM" dev kafka stop --state-dir "$BROKER_DIR" >/dev/null 2>&1 || true
rm -rf "$DEMO"
"$KSTREAM" dev kafka start --state-dir "$BROKER_DIR" >/dev/null
if [[ "${KEEP_BROKER:-0}" != 1 ]]; then
  trap '"$KSTREAM" dev kafka stop --state-dir "$BROKER_DIR" >/dev/null' EXIT
fi
BOOTSTRAP=$(cat "$BROKER_DIR/bootstrap")
echo "== Kafka broker at $BOOTSTRAP"

"$KSTREAM" dev topics create lines --partitions "$PARTITIONS" --bootstrap "$BOOTSTRAP"
"$KSTREAM" dev topics create word-counts --partitions "$PARTITIONS" --bootstrap "$BOOTSTRAP"
# One line every 15 s of event time from 2026-01-01T00:00:00Z: the one-minute
# windows close as the watermark (max event time - 5 s) passes their end.
# Keyed by line number, so the lines land on the same partitions every time.
awk '{print NR":"$0}' topologies/data/words.txt | "$KSTREAM" dev produce lines --key-sep : \
  --event-time-start 1767225600000 --event-time-step 15000 --bootstrap "$BOOTSTRAP"

echo "== running topologies/wordcount.py (coordinator + worker, checkpoint every second)"
if ! "$KSTREAM" -v run topologies/wordcount.py --bootstrap "$BOOTSTRAP" \
  --store "file://$PWD/$DEMO/checkpoints" --state-dir "$DEMO/state" \
  --interval 1 --stop-when-idle 3 > "$DEMO/run.log" 2>&1; then
  tail -n 30 "$DEMO/run.log"
  echo "== the job failed; full log: $DEMO/run.log" >&2
  exit 1
fi
grep -E "completed|restored|resumed" "$DEMO/run.log" | grep -v "^%" || true

echo "== completed checkpoints"
"$KSTREAM" checkpoints list --store "file://$PWD/$DEMO/checkpoints" --app-id wordcount

echo "== word-counts, read_committed (word<TAB>window and count)"
"$KSTREAM" dev consume word-counts --from-beginning --timeout 3 --bootstrap "$BOOTSTRAP" | sort
echo "(later windows are still open: a window fires when the watermark of every input"
echo " partition, its max event time - 5 s, has passed the window's end)"
