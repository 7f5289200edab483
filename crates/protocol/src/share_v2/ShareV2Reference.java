// Reference bytes for crates/protocol/src/share_v2/tests.rs: populated ShareFetch and
// ShareAcknowledge requests and responses at v1 and v2, written by Kafka's own generated message
// classes (kafka-clients 4.3.1, whose specs for these four messages are those of Kafka 4.2 and
// 4.4 too). Not built by cargo. Run with JDK 17+ (single-file source launch):
//
//   java -cp "$(ls compat/.cache/kafka-baseline/lib/*.jar | tr '\n' :)" \
//       crates/protocol/src/share_v2/ShareV2Reference.java
//
// prints NAME HEX lines (the fixtures in tests.rs); with three arguments,
// `ShareFetchRequest 2 HEX` (or ShareAcknowledgeRequest, ShareFetchResponse,
// ShareAcknowledgeResponse), it reads HEX at that version and prints what Kafka makes of it.

import java.nio.ByteBuffer;
import java.util.HexFormat;
import java.util.List;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.message.ShareAcknowledgeRequestData;
import org.apache.kafka.common.message.ShareAcknowledgeResponseData;
import org.apache.kafka.common.message.ShareFetchRequestData;
import org.apache.kafka.common.message.ShareFetchResponseData;
import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.MessageUtil;
import org.apache.kafka.common.protocol.types.RawTaggedField;
import org.apache.kafka.common.record.internal.MemoryRecords;

/** Prints populated ShareFetch/ShareAcknowledge requests and responses as Kafka writes them. */
public class ShareV2Reference {
    static final Uuid ORDERS = new Uuid(0xa5a5a5a5a5a5a5a5L, 0xa5a5a5a5a5a5a5a5L);
    static final Uuid AUDIT = new Uuid(0x3c3c3c3c3c3c3c3cL, 0x3c3c3c3c3c3c3c3cL);

    static String hex(ApiMessage m, int version) {
        ByteBuffer b = MessageUtil.toByteBufferAccessor(m, (short) version).buffer();
        return HexFormat.of().formatHex(MessageUtil.byteBufferToArray(b));
    }

    static ShareFetchRequestData fetchRequest(byte mode, boolean renew) {
        ShareFetchRequestData.FetchTopicCollection topics = new ShareFetchRequestData.FetchTopicCollection();
        ShareFetchRequestData.FetchPartitionCollection partitions = new ShareFetchRequestData.FetchPartitionCollection();
        partitions.add(new ShareFetchRequestData.FetchPartition().setPartitionIndex(0).setAcknowledgementBatches(List.of(
            new ShareFetchRequestData.AcknowledgementBatch().setFirstOffset(0).setLastOffset(9)
                .setAcknowledgeTypes(List.of((byte) 1)),
            new ShareFetchRequestData.AcknowledgementBatch().setFirstOffset(10).setLastOffset(12)
                .setAcknowledgeTypes(List.of((byte) 4, (byte) 2, (byte) 4)))));
        partitions.add(new ShareFetchRequestData.FetchPartition().setPartitionIndex(3));
        topics.add(new ShareFetchRequestData.FetchTopic().setTopicId(ORDERS).setPartitions(partitions));
        ShareFetchRequestData data = new ShareFetchRequestData()
            .setGroupId("share-group").setMemberId("member-1").setShareSessionEpoch(3)
            .setMaxWaitMs(renew ? 0 : 500).setMinBytes(renew ? 0 : 1).setMaxBytes(renew ? 0 : 1048576)
            .setMaxRecords(renew ? 0 : 500).setBatchSize(250)
            .setShareAcquireMode(mode).setIsRenewAck(renew)
            .setTopics(topics)
            .setForgottenTopicsData(List.of(new ShareFetchRequestData.ForgottenTopic()
                .setTopicId(AUDIT).setPartitions(List.of(1, 2))));
        data.unknownTaggedFields().add(new RawTaggedField(100, new byte[] {'t', 'a', 'g'}));
        return data;
    }

    static ShareAcknowledgeRequestData ackRequest(boolean renew) {
        ShareAcknowledgeRequestData.AcknowledgeTopicCollection topics = new ShareAcknowledgeRequestData.AcknowledgeTopicCollection();
        ShareAcknowledgeRequestData.AcknowledgePartitionCollection partitions = new ShareAcknowledgeRequestData.AcknowledgePartitionCollection();
        partitions.add(new ShareAcknowledgeRequestData.AcknowledgePartition().setPartitionIndex(2).setAcknowledgementBatches(List.of(
            new ShareAcknowledgeRequestData.AcknowledgementBatch().setFirstOffset(5).setLastOffset(7)
                .setAcknowledgeTypes(List.of((byte) 4, (byte) 0, (byte) 4)))));
        topics.add(new ShareAcknowledgeRequestData.AcknowledgeTopic().setTopicId(ORDERS).setPartitions(partitions));
        return new ShareAcknowledgeRequestData().setGroupId("share-group").setMemberId("member-1")
            .setShareSessionEpoch(4).setIsRenewAck(renew).setTopics(topics);
    }

    static ShareFetchResponseData fetchResponse() {
        ShareFetchResponseData.ShareFetchableTopicResponseCollection topics = new ShareFetchResponseData.ShareFetchableTopicResponseCollection();
        topics.add(new ShareFetchResponseData.ShareFetchableTopicResponse().setTopicId(ORDERS).setPartitions(List.of(
            new ShareFetchResponseData.PartitionData().setPartitionIndex(0)
                .setAcknowledgeErrorCode((short) 121).setAcknowledgeErrorMessage("bad state")
                .setCurrentLeader(new ShareFetchResponseData.LeaderIdAndEpoch().setLeaderId(1).setLeaderEpoch(5))
                .setRecords(MemoryRecords.readableRecords(ByteBuffer.wrap(new byte[] {1, 2, 3, 4, 5})))
                .setAcquiredRecords(List.of(new ShareFetchResponseData.AcquiredRecords()
                    .setFirstOffset(0).setLastOffset(4).setDeliveryCount((short) 2))),
            new ShareFetchResponseData.PartitionData().setPartitionIndex(1).setErrorCode((short) 6)
                .setErrorMessage("not leader")
                .setCurrentLeader(new ShareFetchResponseData.LeaderIdAndEpoch().setLeaderId(2).setLeaderEpoch(7))
                .setRecords(MemoryRecords.EMPTY))));
        ShareFetchResponseData.NodeEndpointCollection nodes = new ShareFetchResponseData.NodeEndpointCollection();
        nodes.add(new ShareFetchResponseData.NodeEndpoint().setNodeId(2).setHost("broker-2").setPort(9092).setRack(null));
        return new ShareFetchResponseData().setThrottleTimeMs(0).setErrorCode((short) 0)
            .setAcquisitionLockTimeoutMs(30000).setResponses(topics).setNodeEndpoints(nodes);
    }

    static ShareAcknowledgeResponseData ackResponse() {
        ShareAcknowledgeResponseData.ShareAcknowledgeTopicResponseCollection topics = new ShareAcknowledgeResponseData.ShareAcknowledgeTopicResponseCollection();
        topics.add(new ShareAcknowledgeResponseData.ShareAcknowledgeTopicResponse().setTopicId(ORDERS).setPartitions(List.of(
            new ShareAcknowledgeResponseData.PartitionData().setPartitionIndex(2)
                .setCurrentLeader(new ShareAcknowledgeResponseData.LeaderIdAndEpoch().setLeaderId(1).setLeaderEpoch(5)),
            new ShareAcknowledgeResponseData.PartitionData().setPartitionIndex(3).setErrorCode((short) 121)
                .setErrorMessage("bad state")
                .setCurrentLeader(new ShareAcknowledgeResponseData.LeaderIdAndEpoch().setLeaderId(-1).setLeaderEpoch(-1)))));
        ShareAcknowledgeResponseData.NodeEndpointCollection nodes = new ShareAcknowledgeResponseData.NodeEndpointCollection();
        nodes.add(new ShareAcknowledgeResponseData.NodeEndpoint().setNodeId(2).setHost("broker-2").setPort(9092).setRack("rack-b"));
        return new ShareAcknowledgeResponseData().setThrottleTimeMs(0).setErrorCode((short) 0)
            .setAcquisitionLockTimeoutMs(15000).setResponses(topics).setNodeEndpoints(nodes);
    }

    static ApiMessage read(String which, int version, String hex) {
        ByteBufferAccessor in = new ByteBufferAccessor(ByteBuffer.wrap(HexFormat.of().parseHex(hex)));
        short v = (short) version;
        return switch (which) {
            case "ShareFetchRequest" -> new ShareFetchRequestData(in, v);
            case "ShareAcknowledgeRequest" -> new ShareAcknowledgeRequestData(in, v);
            case "ShareFetchResponse" -> new ShareFetchResponseData(in, v);
            case "ShareAcknowledgeResponse" -> new ShareAcknowledgeResponseData(in, v);
            default -> throw new IllegalArgumentException(which);
        };
    }

    public static void main(String[] args) {
        if (args.length == 3) {
            System.out.println(read(args[0], Integer.parseInt(args[1]), args[2]));
            return;
        }
        System.out.println("SHARE_FETCH_REQUEST_V2_RECORD_LIMIT " + hex(fetchRequest((byte) 1, false), 2));
        System.out.println("SHARE_FETCH_REQUEST_V2_RENEW " + hex(fetchRequest((byte) 0, true), 2));
        System.out.println("SHARE_FETCH_REQUEST_V1 " + hex(fetchRequest((byte) 0, false), 1));
        System.out.println("SHARE_ACKNOWLEDGE_REQUEST_V2_RENEW " + hex(ackRequest(true), 2));
        System.out.println("SHARE_ACKNOWLEDGE_REQUEST_V1 " + hex(ackRequest(false), 1));
        System.out.println("SHARE_FETCH_RESPONSE_V2 " + hex(fetchResponse(), 2));
        System.out.println("SHARE_FETCH_RESPONSE_V1 " + hex(fetchResponse(), 1));
        System.out.println("SHARE_ACKNOWLEDGE_RESPONSE_V2 " + hex(ackResponse(), 2));
        System.out.println("SHARE_ACKNOWLEDGE_RESPONSE_V1 " + hex(ackResponse(), 1));
    }
}
