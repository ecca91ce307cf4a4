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
        ObjectNode answer = JSON.createObjectNode();
        ObjectNode nanos = JSON.createObjectNode();
        if (wanted.contains("range")) {
            answer.set("range", run(new RangeAssignor(), cluster, members, Member::plain, repeat,
                nanos.putArray("range")));
        }
        if (wanted.contains("roundrobin")) {
            answer.set("roundrobin", run(new RoundRobinAssignor(), cluster, members, Member::plain, repeat,
                nanos.putArray("roundrobin")));
        }
        if (wanted.contains("sticky")) {
            answer.set("sticky", run(new StickyAssignor(), cluster, members, Member::sticky, repeat,
                nanos.putArray("sticky")));
        }
        if (wanted.contains("cooperative-sticky")) {
            answer.set("cooperative-sticky", run(new CooperativeStickyAssignor(), cluster, members,
                Member::cooperativeSticky, repeat, nanos.putArray("cooperative-sticky")));
        }
        if (repeatNode != null && !repeatNode.isNull()) {
            answer.set("nanos", nanos);
        }
        return answer;
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
                                SubscriptionOf subscriptionOf, int repeat, ArrayNode nanos) {
        Map<String, Assignment> assignments = null;
        try {
            for (int i = 0; i < repeat; i++) {
                Map<String, Subscription> subscriptions = new HashMap<>();
                for (Member member : members) {
                    Subscription subscription = subscriptionOf.of(member);
                    subscription.setGroupInstanceId(member.instanceId);
                    subscriptions.put(member.id, subscription);
                }
                GroupSubscription groupSubscription = new GroupSubscription(subscriptions);
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
