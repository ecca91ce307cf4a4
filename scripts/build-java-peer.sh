#!/usr/bin/env bash
# Builds the Java peer (java/consumer-peer: a KafkaConsumer from kafka-clients) into
# build/java-peer once; a stamp of its sources makes a change rebuild it.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=build/java-peer
STAMP=$OUT/.built
SOURCES=java/consumer-peer

command -v mvn >/dev/null 2>&1 || { echo "build-java-peer: need mvn (Apache Maven) on PATH" >&2; exit 1; }

sum=$(find "$SOURCES" -type f \( -name '*.java' -o -name '*.xml' -o -name '*.properties' \) -print0 \
    | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
if [[ -f $STAMP && $(cat "$STAMP") == "$sum" ]]; then
    exit 0
fi
echo "build-java-peer: building the Java peer (kafka-clients) into ${OUT} (once) ..."
start=$(date +%s)
mvn -q -B -Dstyle.color=never -f "$SOURCES/pom.xml" package
echo "$sum" > "$STAMP"
echo "build-java-peer: done in $(( $(date +%s) - start ))s"
