#!/usr/bin/env bash
# Resolves Apache Kafka's broker jars (java/broker/pom.xml) from Maven Central into build/kafka/libs,
# once: a stamp next to the jars records the pom it came from, so a new pin installs again.
set -euo pipefail
cd "$(dirname "$0")/.."

LIBS=build/kafka/libs
STAMP=build/kafka/.installed
POM=java/broker/pom.xml

command -v java >/dev/null 2>&1 || { echo "install-kafka: need java (a JDK 17+) on PATH" >&2; exit 1; }
command -v mvn >/dev/null 2>&1 || { echo "install-kafka: need mvn (Apache Maven) on PATH" >&2; exit 1; }

pom_sum=$(sha256sum "$POM" | cut -d' ' -f1)
if [[ -f $STAMP && $(cat "$STAMP") == "$pom_sum" ]]; then
    exit 0
fi

version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$POM")
echo "install-kafka: resolving Apache Kafka ${version} from Maven Central into ${LIBS} (once) ..."
start=$(date +%s)
rm -rf "$LIBS"
mkdir -p "$LIBS"
mvn -q -B -Dstyle.color=never -f "$POM" package
echo "$pom_sum" > "$STAMP"
echo "install-kafka: $(ls "$LIBS" | wc -l) jars in $(( $(date +%s) - start ))s"
