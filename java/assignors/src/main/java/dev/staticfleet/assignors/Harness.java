package dev.staticfleet.assignors;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Assignment;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.GroupSubscription;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Subscription;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.internals.ConsumerProtocol;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.consumer.RoundRobinAssignor;
import org.apache.kafka.clients.consumer.StickyAssignor;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;

/**
 * Runs Kafka's own assignors on a batch of groups: one JSON object per line on stdin, one
 * answer per line on stdout (flushed, so a caller can keep the JVM for a whole test run).
 *
 * <p>A case: {"topics": {"t": 3}, "members": [{"id": "m", "instance": "i-m" | null,
 * "topics": ["t"], "owned": [["t", 0]], "generation": 2}]}. The answer maps each assignor name
 * (range, roundrobin, sticky, cooperative-sticky; only those listed in an optional "assignors"
 * array) to {member id: [[topic, partition], ...]}, or to {"error": message} when Kafka's
 * assignor throws. With "repeat": n each assignor runs n times and the answer adds
 * "nanos": {assignor: [nanoseconds of each assign call]} (the benchmark's side-by-side).
 * With "serialize": true it also runs `repeat` more calls timed around `assign` plus
 * `ConsumerProtocol.serializeAssignment` of every member's assignment (what the group leader
 * does before SyncGroup), adding "serialize_nanos" and "sha256" (of member id, byte length and
 * bytes of each serialized assignment, members in id order) and "sorted_sha256" (of member id,
 * then topic, a zero byte and int32 partition of each partition in (topic, partition) order:
 * the assignment whatever order Kafka lists it in). With "answer": "sizes" each
 * assignor's answer is {member id: partition count} instead of the partitions.
 *
 * <p>Each member's subscription is built the way Kafka's consumer builds it: the instance id
 * set; for sticky (eager) no owned partitions and the user data of a StickyAssignor that was
 * given the owned partitions in that generation; for cooperative-sticky the owned partitions
 * and generation in the subscription (v2) plus the user data of its own assignor instance.
 */
public final class Harness {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final String GROUP = "harness";

    private Harness() {
    }

    public static void main(String[] args) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        BufferedWriter out = new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            out.write(JSON.writeValueAsString(answer(JSON.readTree(line))));
            out.newLine();
            out.flush();
        }
    }

    private static ObjectNode answer(JsonNode group) {
        Cluster cluster = cluster(group.get("topics"));
        List<Member> members = new ArrayList<>();
        for (JsonNode member : group.get("members")) {
            members.add(Member.of(member));
        }
        Set<String> wanted = new TreeSet<>();
        JsonNode only = group.get("assignors");
        if (only == null || only.isNull()) {
            wanted.addAll(List.of("range", "roundrobin", "sticky", "cooperative-sticky"));
        } else {
            only.forEach(name -> wanted.add(name.asText()));
        }
        JsonNode repeatNode = group.get("repeat");
        int repeat = repeatNode == null || repeatNode.isNull() ? 1 : Math.max(1, repeatNode.asInt());
        JsonNode serializeNode = group.get("serialize");
        boolean serialize = serializeNode != null && serializeNode.asBoolean(false);
        JsonNode answerNode = group.get("answer");
        boolean sizesOnly = answerNode != null && "sizes".equals(answerNode.asText());
        Run run = new Run(cluster, members, repeat, serialize, sizesOnly);
        if (wanted.contains("range")) {
            run.of("range", new RangeAssignor(), Member::plain);
        }
        if (wanted.contains("roundrobin")) {
            run.of("roundrobin", new RoundRobinAssignor(), Member::plain);
        }
        if (wanted.contains("sticky")) {
            run.of("sticky", new StickyAssignor(), Member::sticky);
        }
        if (wanted.contains("cooperative-sticky")) {
            run.of("cooperative-sticky", new CooperativeStickyAssignor(), Member::cooperativeSticky);
        }
        if (repeatNode != null && !repeatNode.isNull()) {
            run.answer.set("nanos", run.nanos);
        }
        if (serialize) {
            run.answer.set("serialize_nanos", run.serializeNanos);
            run.answer.set("sha256", run.digests);
            run.answer.set("sorted_sha256", run.sortedDigests);
        }
        return run.answer;
    }

    /** One group's runs of the wanted assignors, and what the answer collects. */
    private static final class Run {
        final Cluster cluster;
        final List<Member> members;
        final int repeat;
        final boolean serialize;
        final boolean sizesOnly;
        final ObjectNode answer = JSON.createObjectNode();
        final ObjectNode nanos = JSON.createObjectNode();
        final ObjectNode serializeNanos = JSON.createObjectNode();
        final ObjectNode digests = JSON.createObjectNode();
        final ObjectNode sortedDigests = JSON.createObjectNode();

        Run(Cluster cluster, List<Member> members, int repeat, boolean serialize, boolean sizesOnly) {
            this.cluster = cluster;
            this.members = members;
            this.repeat = repeat;
            this.serialize = serialize;
            this.sizesOnly = sizesOnly;
        }

        void of(String name, ConsumerPartitionAssignor assignor, SubscriptionOf subscriptionOf) {
            JsonNode result = run(assignor, cluster, members, subscriptionOf, repeat, nanos.putArray(name),
                sizesOnly);
            answer.set(name, result);
            if (serialize && !result.has("error")) {
                String[] both = serialized(assignor, cluster, members, subscriptionOf, repeat,
                    serializeNanos.putArray(name));
                digests.put(name, both[0]);
                sortedDigests.put(name, both[1]);
            }
        }
    }

    /** `repeat` calls timed around assign plus serializing every member's assignment; the
     * digests of the last call's bytes and of its partitions in order. */
    private static String[] serialized(ConsumerPartitionAssignor assignor, Cluster cluster, List<Member> members,
                                     SubscriptionOf subscriptionOf, int repeat, ArrayNode nanos) {
        Map<String, ByteBuffer> bytes = null;
        Map<String, Assignment> last = null;
        for (int i = 0; i < repeat; i++) {
            GroupSubscription groupSubscription = groupSubscription(members, subscriptionOf);
            long start = System.nanoTime();
            Map<String, Assignment> assignments = assignor.assign(cluster, groupSubscription).groupAssignment();
            bytes = new HashMap<>();
            for (Map.Entry<String, Assignment> entry : assignments.entrySet()) {
                bytes.put(entry.getKey(), ConsumerProtocol.serializeAssignment(entry.getValue()));
            }
            nanos.add(System.nanoTime() - start);
            last = assignments;
        }
        try {
            MessageDigest digest = MessageDigest.getInstance("SHA-256");
            for (Map.Entry<String, ByteBuffer> entry : new TreeMap<>(bytes).entrySet()) {
                ByteBuffer buffer = entry.getValue().duplicate();
                digest.update(entry.getKey().getBytes(StandardCharsets.UTF_8));
                digest.update(ByteBuffer.allocate(4).putInt(buffer.remaining()).array());
                digest.update(buffer);
            }
            MessageDigest sorted = MessageDigest.getInstance("SHA-256");
            for (Map.Entry<String, Assignment> entry : new TreeMap<>(last).entrySet()) {
                sorted.update(entry.getKey().getBytes(StandardCharsets.UTF_8));
                List<TopicPartition> partitions = new ArrayList<>(entry.getValue().partitions());
                partitions.sort((a, b) -> a.topic().equals(b.topic())
                    ? Integer.compare(a.partition(), b.partition()) : a.topic().compareTo(b.topic()));
                for (TopicPartition tp : partitions) {
                    sorted.update(tp.topic().getBytes(StandardCharsets.UTF_8));
                    sorted.update((byte) 0);
                    sorted.update(ByteBuffer.allocate(4).putInt(tp.partition()).array());
                }
            }
            return new String[] {hex(digest.digest()), hex(sorted.digest())};
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    private static String hex(byte[] bytes) {
        StringBuilder hex = new StringBuilder();
        for (byte b : bytes) {
            hex.append(String.format("%02x", b));
        }
        return hex.toString();
    }

    private static GroupSubscription groupSubscription(List<Member> members, SubscriptionOf subscriptionOf) {
        Map<String, Subscription> subscriptions = new HashMap<>();
        for (Member member : members) {
            Subscription subscription = subscriptionOf.of(member);
            subscription.setGroupInstanceId(member.instanceId);
            subscriptions.put(member.id, subscription);
        }
        return new GroupSubscription(subscriptions);
    }

    private static Cluster cluster(JsonNode topics) {
        List<PartitionInfo> partitions = new ArrayList<>();
        Iterator<Map.Entry<String, JsonNode>> fields = topics.fields();
        while (fields.hasNext()) {
            Map.Entry<String, JsonNode> topic = fields.next();
            for (int p = 0; p < topic.getValue().asInt(); p++) {
                partitions.add(new PartitionInfo(topic.getKey(), p, Node.noNode(), new Node[0], new Node[0]));
            }
        }
        return new Cluster("harness", Collections.emptyList(), partitions, Collections.emptySet(),
            Collections.emptySet());
    }

    private interface SubscriptionOf {
        Subscription of(Member member);
    }

    /** Kafka's answer; with `repeat` above one the assignment is computed that many times
     * (subscriptions rebuilt each time, not timed) and each `assign` call's nanoseconds are
     * added to `nanos`, for the benchmark. */
    private static JsonNode run(ConsumerPartitionAssignor assignor, Cluster cluster, List<Member> members,
                                SubscriptionOf subscriptionOf, int repeat, ArrayNode nanos, boolean sizesOnly) {
        Map<String, Assignment> assignments = null;
        try {
            for (int i = 0; i < repeat; i++) {
                GroupSubscription groupSubscription = groupSubscription(members, subscriptionOf);
                long start = System.nanoTime();
                assignments = assignor.assign(cluster, groupSubscription).groupAssignment();
                nanos.add(System.nanoTime() - start);
            }
        } catch (RuntimeException e) {
            ObjectNode error = JSON.createObjectNode();
            error.put("error", e.getClass().getSimpleName() + ": " + e.getMessage());
            return error;
        }
        ObjectNode result = JSON.createObjectNode();
        for (Map.Entry<String, Assignment> entry : new TreeMap<>(assignments).entrySet()) {
            if (sizesOnly) {
                result.put(entry.getKey(), entry.getValue().partitions().size());
                continue;
            }
            ArrayNode partitions = result.putArray(entry.getKey());
            for (TopicPartition tp : entry.getValue().partitions()) {
                partitions.addArray().add(tp.topic()).add(tp.partition());
            }
        }
        return result;
    }

    private static final class Member {
        final String id;
        final Optional<String> instanceId;
        final List<String> topics;
        final List<TopicPartition> owned;
        final int generation;

        private Member(String id, Optional<String> instanceId, List<String> topics, List<TopicPartition> owned,
                       int generation) {
            this.id = id;
            this.instanceId = instanceId;
            this.topics = topics;
            this.owned = owned;
            this.generation = generation;
        }

        static Member of(JsonNode node) {
            JsonNode instance = node.get("instance");
            List<String> topics = new ArrayList<>();
            node.get("topics").forEach(topic -> topics.add(topic.asText()));
            List<TopicPartition> owned = new ArrayList<>();
            node.get("owned").forEach(tp -> owned.add(new TopicPartition(tp.get(0).asText(), tp.get(1).asInt())));
            return new Member(
                node.get("id").asText(),
                instance == null || instance.isNull() ? Optional.empty() : Optional.of(instance.asText()),
                topics,
                owned,
                node.get("generation").asInt());
        }

        private ConsumerGroupMetadata metadata() {
            return new ConsumerGroupMetadata(GROUP, generation, id, instanceId);
        }

        private Set<String> topicSet() {
            return new TreeSet<>(topics);
        }

        Subscription plain() {
            return new Subscription(topics, null, owned, generation, Optional.empty());
        }

        /** Eager: the consumer revoked everything before joining; the claim is in the user data. */
        Subscription sticky() {
            StickyAssignor own = new StickyAssignor();
            if (!owned.isEmpty() || generation >= 0) {
                own.onAssignment(new Assignment(owned), metadata());
            }
            ByteBuffer userData = own.subscriptionUserData(topicSet());
            return new Subscription(topics, userData, Collections.emptyList(), generation, Optional.empty());
        }

        Subscription cooperativeSticky() {
            CooperativeStickyAssignor own = new CooperativeStickyAssignor();
            own.onAssignment(new Assignment(owned), metadata());
            ByteBuffer userData = own.subscriptionUserData(topicSet());
            return new Subscription(topics, userData, owned, generation, Optional.empty());
        }
    }
}
