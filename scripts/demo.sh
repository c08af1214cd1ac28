#!/usr/bin/env bash
# The kstream demo: a local Kafka broker, the input topic filled from
# topologies/data/words.txt, the word-count job, and its output.
#
# Env: KSTREAM (kstream executable, default: kstream on PATH), KEEP_BROKER=1 to leave
# the broker running afterwards (stop it with `kstream dev kafka stop`),
# INPUT_TOPIC (default words), OUTPUT_TOPIC (default word-counts), PARTITIONS (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."

KSTREAM=${KSTREAM:-kstream}
INPUT_TOPIC=${INPUT_TOPIC:-words}
OUTPUT_TOPIC=${OUTPUT_TOPIC:-word-counts}
PARTITIONS=${PARTITIONS:-3}
STATE_DIR=.kstream/kafka

"$KSTREAM" dev kafka start --state-dir "$STATE_DIR" >/dev/null
if [[ "${KEEP_BROKER:-0}" != 1 ]]; then
  trap '"$KSTREAM" dev kafka stop --state-dir "$STATE_DIR"' EXIT
fi
BOOTSTRAP=$(cat "$STATE_DIR/bootstrap")
echo "== Kafka broker at $BOOTSTRAP"

"$KSTREAM" dev topics create "$INPUT_TOPIC" --partitions "$PARTITIONS" --bootstrap "$BOOTSTRAP"
"$KSTREAM" dev topics create "$OUTPUT_TOPIC" --partitions "$PARTITIONS" --bootstrap "$BOOTSTRAP"
"$KSTREAM" dev produce "$INPUT_TOPIC" --file topologies/data/words.txt --bootstrap "$BOOTSTRAP"

# ---------------------------------------------------------------- the job
# TODO(lead): `kstream run` is being written in parallel; wire its exact options here
# (bounded run over the input, so the demo ends by itself).
echo "== running topologies/wordcount.py"
"$KSTREAM" run topologies/wordcount.py --bootstrap "$BOOTSTRAP"
# ---------------------------------------------------------------- /the job

echo "== $OUTPUT_TOPIC (key<TAB>count)"
"$KSTREAM" dev consume "$OUTPUT_TOPIC" --from-beginning --timeout 5 --bootstrap "$BOOTSTRAP" | sort
