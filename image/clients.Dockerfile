# syntax=docker/dockerfile:1
# Kafka client images over the chart's image, one target per client family, for member pods of
# that family (`clientFamily` in a Kafka-coordinated ConsumerGroup) on a real node:
#
#   scripts/build-image.sh rdkafka   -> build/image/staticfleet-rdkafka.oci.tar
#   scripts/build-image.sh java      -> build/image/staticfleet-java.oci.tar
#   scripts/build-image.sh spark     -> build/image/staticfleet-spark.oci.tar (Spark executors)
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

# --- a JRE: Debian's, for the Java peer and Spark's executor JVM ---------------------------
FROM ${STATICFLEET_IMAGE} AS jre
USER root
# Debian's slim images leave out man pages; the JRE's alternatives link into man1 all the same.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/* \
 && java -version

# --- Java: the Java peer (java/consumer-peer, a stock KafkaConsumer) on Debian's JRE ----------
# The peer's jars come from the host's Maven build (scripts/build-java-peer.sh), given to the
# build as the named context `javapeer` (build/java-peer).
FROM jre AS java
COPY --from=javapeer consumer-peer.jar /opt/staticfleet/java-peer/consumer-peer.jar
COPY --from=javapeer lib /opt/staticfleet/java-peer/lib
# staticfleet/kafka/java_peer.py: the peer already built here, never built at start.
ENV STATICFLEET_JAVA_PEER_DIR=/opt/staticfleet/java-peer
USER 10001:10001
# staticfleet/kafka/java_pod.py: configured by the env the operator injects; it execs the JVM.
ENTRYPOINT ["python", "-m", "staticfleet.kafka.java_pod"]
CMD []

# --- Spark: executor pods of a Spark driver on Kubernetes (docs/spark.md) --------------------
# `spark.kubernetes.container.image` for executors whose tasks are members
# (pipeline/executor_members.py, already in the chart's image): PySpark (its jars are Spark's)
# at constraints.txt's version, the one the driver runs, on the JRE; tini as Spark's image has.
FROM jre AS spark
COPY constraints.txt /tmp/constraints.txt
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/* \
 && pip install -c /tmp/constraints.txt pyspark \
 && rm /tmp/constraints.txt \
 && python -c "import pyspark; print('pyspark', pyspark.__version__)"
COPY --chmod=0755 image/spark-entrypoint.sh /usr/local/bin/spark-entrypoint.sh
# Where the entrypoint finds Spark's jars; the executor's Python workers run `python3` (the
# driver's PYSPARK_PYTHON), this venv's, which has PySpark and the project's packages.
ENV SPARK_HOME=/opt/python/lib/python3.11/site-packages/pyspark
USER 10001:10001
ENTRYPOINT ["/usr/local/bin/spark-entrypoint.sh"]
CMD []
