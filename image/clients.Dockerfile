# syntax=docker/dockerfile:1
# Kafka client images over the chart's image, one target per client family, for member pods of
# that family (`clientFamily` in a Kafka-coordinated ConsumerGroup) on a real node:
#
#   scripts/build-image.sh rdkafka   -> build/image/staticfleet-rdkafka.oci.tar
#   scripts/build-image.sh java      -> build/image/staticfleet-java.oci.tar
#   (with Docker: docker build -f image/clients.Dockerfile --target rdkafka
#    --build-arg STATICFLEET_IMAGE=staticfleet:0.1.0 [--build-context javapeer=build/java-peer] .)
#
# The chart's image comes first (STATICFLEET_IMAGE, scripts/build-image.sh's); PyPI is reached at
# the versions constraints.txt pins (the ones the tests ran against), and Debian for the JRE.

ARG STATICFLEET_IMAGE=staticfleet:0.1.0

# --- librdkafka: confluent-kafka's Consumer (its wheel bundles librdkafka) --------------------
FROM ${STATICFLEET_IMAGE} AS rdkafka
USER root
COPY constraints.txt /tmp/constraints.txt
RUN pip install -c /tmp/constraints.txt confluent-kafka \
 && rm /tmp/constraints.txt \
 && python -c "import confluent_kafka; print('librdkafka', confluent_kafka.libversion()[0])"
USER 10001:10001
# staticfleet/kafka/rdkafka_pod.py: configured by the env the operator injects.
ENTRYPOINT ["python", "-m", "staticfleet.kafka.rdkafka_pod"]
CMD []

# --- Java: the Java peer (java/consumer-peer, a stock KafkaConsumer) on Debian's JRE ----------
# The peer's jars come from the host's Maven build (scripts/build-java-peer.sh), given to the
# build as the named context `javapeer` (build/java-peer).
FROM ${STATICFLEET_IMAGE} AS java
USER root
# Debian's slim images leave out man pages; the JRE's alternatives link into man1 all the same.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/* \
 && java -version
COPY --from=javapeer consumer-peer.jar /opt/staticfleet/java-peer/consumer-peer.jar
COPY --from=javapeer lib /opt/staticfleet/java-peer/lib
# staticfleet/kafka/java_peer.py: the peer already built here, never built at start.
ENV STATICFLEET_JAVA_PEER_DIR=/opt/staticfleet/java-peer
USER 10001:10001
# staticfleet/kafka/java_pod.py: configured by the env the operator injects; it execs the JVM.
ENTRYPOINT ["python", "-m", "staticfleet.kafka.java_pod"]
CMD []
