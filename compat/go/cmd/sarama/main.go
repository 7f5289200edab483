// Command sarama runs the compatibility steps with IBM/sarama against one broker, and prints
// one JSON line per step (compat/python/test_go_clients.py).
//
// Configured as an application on Kafka 4 would be: Version V4_0_0_0 (sarama picks request
// versions from it), an idempotent producer with acks=all (Net.MaxOpenRequests=1, as sarama
// requires for idempotence). Steps, on one 3-partition topic: create it (ClusterAdmin) ->
// produce 10,000 keyed records with headers and explicit timestamps -> read them all back from
// the oldest offset (Consumer.ConsumePartition) -> offsets (oldest, newest, by time) -> a
// classic consumer group committing, a second member resuming at the commit -> admin: describe
// topics, describe/alter configs, create partitions, delete records, describe cluster,
// list/describe groups and their offsets, delete the group -> a transaction -> delete the topic.
// sarama has no KIP-848 consumer and no share consumer.
package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"sluice/compat/go/internal/compat"
)

const client = "sarama"

type state struct {
	o         compat.Options
	topic     string
	run       string
	records   []compat.Rec
	delivered map[int]compat.Where
	got       []compat.Got
	counts    map[int32]int64
	group     string
	admin     sarama.ClusterAdmin
	adminErr  error // NewClusterAdmin's; steps that need no earlier step check it
}

func main() {
	o := compat.ParseOptions()
	s := &state{o: o, topic: compat.TopicName("sarama")}
	s.run = s.topic[strings.LastIndex(s.topic, "-")+1:]
	if !o.List {
		s.admin, s.adminErr = sarama.NewClusterAdmin(o.Bootstrap, s.config("admin"))
	}
	compat.Run(client, o, []compat.Step{
		{Name: "create_topic", Run: s.createTopic},
		{Name: "produce_idempotent", Needs: []string{"create_topic"}, Run: s.produce},
		{Name: "read_back", Needs: []string{"produce_idempotent"}, Run: s.readBack},
		{Name: "list_offsets", Needs: []string{"read_back"}, Run: s.listOffsets},
		{Name: "group_classic", Needs: []string{"read_back"}, Run: s.groupClassic},
		{Name: "group_consumer_protocol", Run: func(context.Context) error {
			return compat.Skip("sarama 1.61 has no KIP-848 consumer (classic protocol only)")
		}},
		{Name: "describe_topics", Needs: []string{"create_topic"}, Run: s.describeTopics},
		{Name: "configs", Needs: []string{"create_topic"}, Run: s.configs},
		{Name: "create_partitions", Needs: []string{"create_topic"}, Run: s.createPartitions},
		{Name: "delete_records", Needs: []string{"read_back"}, Run: s.deleteRecords},
		{Name: "describe_cluster", Run: s.describeCluster},
		{Name: "list_describe_groups", Needs: []string{"group_classic"}, Run: s.listDescribeGroups},
		{Name: "share_group", Run: func(context.Context) error { return compat.Skip("sarama 1.61 has no share consumer (KIP-932)") }},
		{Name: "transactions", Run: s.transactions},
		{Name: "delete_topic", Needs: []string{"create_topic"}, Run: s.deleteTopic},
	})
}

func (s *state) config(role string) *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V4_0_0_0
	c.ClientID = fmt.Sprintf("compat-sarama-%s-%s", role, s.run)
	c.Metadata.Retry.Max = 10
	c.Metadata.Retry.Backoff = 200 * time.Millisecond
	return c
}

func (s *state) needAdmin() error {
	if s.adminErr != nil {
		return fmt.Errorf("NewClusterAdmin: %w", s.adminErr)
	}
	return nil
}

func (s *state) createTopic(ctx context.Context) error {
	if err := s.needAdmin(); err != nil {
		return err
	}
	err := s.admin.CreateTopic(s.topic, &sarama.TopicDetail{NumPartitions: compat.Partitions, ReplicationFactor: 1,
		ConfigEntries: map[string]*string{"retention.bytes": ptr("1073741824")}}, false)
	if err != nil {
		return fmt.Errorf("CreateTopic: %w", err)
	}
	err = s.admin.CreateTopic(s.topic, &sarama.TopicDetail{NumPartitions: compat.Partitions, ReplicationFactor: 1}, false)
	if !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		return fmt.Errorf("creating %s again answered %v, want TOPIC_ALREADY_EXISTS", s.topic, err)
	}
	return s.waitKnownEverywhere(compat.Partitions)
}

// waitKnownEverywhere waits until Metadata through each bootstrap broker alone lists the topic
// with n partitions (see compat/README.md, cluster mode).
func (s *state) waitKnownEverywhere(n int) error {
	for _, addr := range s.o.Bootstrap {
		err := compat.WaitUntil(30*time.Second, fmt.Sprintf("%s with %d partitions in Metadata through %s", s.topic, n, addr), func() (bool, error) {
			b := sarama.NewBroker(addr)
			if err := b.Open(s.config("topic-known")); err != nil {
				return false, err
			}
			defer b.Close()
			md, err := b.GetMetadata(&sarama.MetadataRequest{Version: 7, Topics: []string{s.topic}})
			if err != nil {
				return false, err
			}
			for _, t := range md.Topics {
				if t.Name == s.topic && t.Err == sarama.ErrNoError && len(t.Partitions) == n {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func toMessage(topic string, r compat.Rec) *sarama.ProducerMessage {
	hs := make([]sarama.RecordHeader, len(r.Headers))
	for i, h := range r.Headers {
		hs[i] = sarama.RecordHeader{Key: []byte(h.Key), Value: h.Value}
	}
	m := &sarama.ProducerMessage{Topic: topic, Key: sarama.ByteEncoder(r.Key), Headers: hs,
		Timestamp: time.UnixMilli(r.TimestampMs), Metadata: r.Seq}
	if r.Value != nil {
		m.Value = sarama.ByteEncoder(r.Value)
	}
	return m
}

func fromMessage(m *sarama.ConsumerMessage) compat.Got {
	hs := make([]compat.Header, len(m.Headers))
	for i, h := range m.Headers {
		hs[i] = compat.Header{Key: string(h.Key), Value: h.Value}
	}
	// sarama does not say whether a timestamp is CreateTime or LogAppendTime; the value check
	// catches a LogAppendTime stamp.
	return compat.Got{Partition: m.Partition, Offset: m.Offset, Key: m.Key, Value: m.Value, Headers: hs,
		TimestampMs: m.Timestamp.UnixMilli(), CreateTime: true}
}

// produceRecords sends recs with an idempotent async producer (acks=all) and returns where
// each landed, by seq.
func (s *state) produceRecords(ctx context.Context, role string, recs []compat.Rec) (map[int]compat.Where, error) {
	c := s.config(role)
	c.Producer.Idempotent = true
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Net.MaxOpenRequests = 1
	c.Producer.Return.Successes = true
	c.Producer.Return.Errors = true
	c.Producer.Retry.Max = 10
	c.Producer.Flush.Frequency = 5 * time.Millisecond
	p, err := sarama.NewAsyncProducer(s.o.Bootstrap, c)
	if err != nil {
		return nil, fmt.Errorf("NewAsyncProducer: %w", err)
	}
	delivered := map[int]compat.Where{}
	var errs []string
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for m := range p.Successes() {
			delivered[m.Metadata.(int)] = compat.Where{Partition: m.Partition, Offset: m.Offset}
		}
	}()
	go func() {
		defer wg.Done()
		for e := range p.Errors() {
			errs = append(errs, fmt.Sprintf("seq %v: %v", e.Msg.Metadata, e.Err))
		}
	}()
	for _, r := range recs {
		select {
		case p.Input() <- toMessage(s.topic, r):
		case <-ctx.Done():
			p.AsyncClose()
			wg.Wait()
			return nil, ctx.Err()
		}
	}
	p.AsyncClose() // flushes, then closes Successes and Errors
	wg.Wait()
	if len(errs) > 0 {
		return nil, fmt.Errorf("%d produce errors, e.g. %s", len(errs), strings.Join(errs[:min(3, len(errs))], "; "))
	}
	if len(delivered) != len(recs) {
		return nil, fmt.Errorf("%d acknowledgements for %d records", len(delivered), len(recs))
	}
	return delivered, nil
}

func (s *state) produce(ctx context.Context) error {
	s.records = compat.MakeRecords(client, compat.NowMs()-3_600_000, compat.NRecords)
	delivered, err := s.produceRecords(ctx, "producer", s.records)
	if err != nil {
		return err
	}
	s.delivered = delivered
	s.counts = map[int32]int64{}
	for _, w := range delivered {
		s.counts[w.Partition]++
	}
	return nil
}

func (s *state) readBack(ctx context.Context) error {
	c, err := sarama.NewConsumer(s.o.Bootstrap, s.config("consumer"))
	if err != nil {
		return fmt.Errorf("NewConsumer: %w", err)
	}
	defer c.Close()
	var got []compat.Got
	for p := int32(0); p < compat.Partitions; p++ {
		if s.counts[p] == 0 {
			continue
		}
		pc, err := c.ConsumePartition(s.topic, p, sarama.OffsetOldest)
		if err != nil {
			return fmt.Errorf("ConsumePartition %d: %w", p, err)
		}
		n := int64(0)
		for n < s.counts[p] {
			select {
			case m := <-pc.Messages():
				got = append(got, fromMessage(m))
				n++
			case e := <-pc.Errors():
				pc.Close()
				return fmt.Errorf("partition %d: %w", p, e.Err)
			case <-ctx.Done():
				pc.Close()
				return fmt.Errorf("partition %d: read %d of %d: %w", p, n, s.counts[p], ctx.Err())
			}
		}
		pc.Close()
	}
	if err := compat.CheckReadBack(s.records, got, s.delivered, compat.Partitions); err != nil {
		return err
	}
	s.got = got
	return nil
}

func (s *state) listOffsets(ctx context.Context) error {
	cl, err := sarama.NewClient(s.o.Bootstrap, s.config("offsets"))
	if err != nil {
		return err
	}
	defer cl.Close()
	for p := int32(0); p < compat.Partitions; p++ {
		oldest, err1 := cl.GetOffset(s.topic, p, sarama.OffsetOldest)
		newest, err2 := cl.GetOffset(s.topic, p, sarama.OffsetNewest)
		if err1 != nil || err2 != nil || oldest != 0 || newest != s.counts[p] {
			return fmt.Errorf("partition %d: oldest %d (%v), newest %d (%v); want 0 and %d", p, oldest, err1, newest, err2, s.counts[p])
		}
	}
	for _, l := range compat.OffsetLookups(s.got) {
		for p := int32(0); p < compat.Partitions; p++ {
			o, err := cl.GetOffset(s.topic, p, l.Ts)
			want := compat.ExpectedOffsetForTime(s.got, p, l.Ts) // -1: no record at or after ts
			if err != nil || o != want {
				return fmt.Errorf("offset for time %s (ts %d) partition %d: %d (%v), want %d", l.Label, l.Ts, p, o, err, want)
			}
		}
	}
	return nil
}

// groupHandler reads claims until want distinct records arrived, marking each message.
type groupHandler struct {
	mu   sync.Mutex
	got  []compat.Got
	seen map[int]bool
	want int
	done chan struct{}
	once sync.Once
}

func (h *groupHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *groupHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *groupHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case m, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			g := fromMessage(m)
			sess.MarkMessage(m, "")
			h.mu.Lock()
			h.got = append(h.got, g)
			h.seen[compat.SeqOf(g)] = true
			if len(h.seen) >= h.want {
				sess.Commit()
				h.once.Do(func() { close(h.done) })
			}
			h.mu.Unlock()
		case <-sess.Context().Done():
			return nil
		}
	}
}

// consumeInGroup: one member of s.group reads until want records, commits and leaves.
func (s *state) consumeInGroup(ctx context.Context, role string, want int) ([]compat.Got, error) {
	c := s.config(role)
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.Offsets.AutoCommit.Enable = false
	g, err := sarama.NewConsumerGroup(s.o.Bootstrap, s.group, c)
	if err != nil {
		return nil, fmt.Errorf("NewConsumerGroup: %w", err)
	}
	h := &groupHandler{seen: map[int]bool{}, want: want, done: make(chan struct{})}
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		for cctx.Err() == nil {
			if err := g.Consume(cctx, []string{s.topic}, h); err != nil && cctx.Err() == nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	var failed error
	select {
	case <-h.done:
	case err := <-errc:
		failed = fmt.Errorf("Consume: %v", err)
	case <-ctx.Done():
		failed = ctx.Err()
	}
	cancel()
	if err := g.Close(); err != nil && failed == nil {
		failed = fmt.Errorf("close: %w", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if failed != nil {
		return h.got, fmt.Errorf("%s read %d of %d records: %w", role, len(h.seen), want, failed)
	}
	return h.got, nil
}

func (s *state) groupClassic(ctx context.Context) error {
	s.group = "compat-sarama-classic-" + s.run
	got, err := s.consumeInGroup(ctx, "member1", len(s.records))
	if err != nil {
		return err
	}
	if len(got) != len(s.records) {
		return fmt.Errorf("first member read %d records, want %d (duplicates?)", len(got), len(s.records))
	}
	if err := s.checkCommitted(); err != nil {
		return err
	}
	more := compat.MakeRecords(client, compat.NowMs(), len(s.records)+30)[len(s.records):]
	delivered, err := s.produceRecords(ctx, "producer-more", more)
	if err != nil {
		return fmt.Errorf("producing 30 more: %w", err)
	}
	got2, err := s.consumeInGroup(ctx, "member2", 30)
	if err != nil {
		return err
	}
	for _, g := range got2 {
		seq := compat.SeqOf(g)
		if seq < len(s.records) {
			return fmt.Errorf("second member read seq %d at p%d@%d: a record committed by the first", seq, g.Partition, g.Offset)
		}
		if d := delivered[seq]; d != (compat.Where{Partition: g.Partition, Offset: g.Offset}) {
			return fmt.Errorf("second member read seq %d at p%d@%d, producer was told %v", seq, g.Partition, g.Offset, d)
		}
	}
	if len(got2) != 30 {
		return fmt.Errorf("second member read %d records, want the 30 new ones", len(got2))
	}
	for _, w := range delivered {
		s.counts[w.Partition]++
	}
	return s.checkCommitted()
}

// checkCommitted: the group's committed offsets (OffsetFetch through ClusterAdmin) are the end
// offsets.
func (s *state) checkCommitted() error {
	resp, err := s.admin.ListConsumerGroupOffsets(s.group, map[string][]int32{s.topic: {0, 1, 2}})
	if err != nil {
		return fmt.Errorf("ListConsumerGroupOffsets: %w", err)
	}
	for p := int32(0); p < compat.Partitions; p++ {
		b := resp.GetBlock(s.topic, p)
		if b == nil || b.Err != sarama.ErrNoError || b.Offset != s.counts[p] {
			return fmt.Errorf("committed offset of partition %d: %+v, want %d", p, b, s.counts[p])
		}
	}
	return nil
}

func (s *state) describeTopics(ctx context.Context) error {
	md, err := s.admin.DescribeTopics([]string{s.topic})
	if err != nil {
		return fmt.Errorf("DescribeTopics: %w", err)
	}
	if len(md) != 1 || md[0].Err != sarama.ErrNoError || len(md[0].Partitions) < compat.Partitions {
		return fmt.Errorf("DescribeTopics: %+v", md)
	}
	if md[0].Uuid == (sarama.Uuid{}) {
		return fmt.Errorf("topic id is zero")
	}
	for _, p := range md[0].Partitions {
		if p.Leader < 0 || len(p.Replicas) != 1 || p.Replicas[0] != p.Leader || len(p.Isr) != 1 || p.Isr[0] != p.Leader {
			return fmt.Errorf("partition %d: leader %d, replicas %v, ISR %v", p.ID, p.Leader, p.Replicas, p.Isr)
		}
	}
	topics, err := s.admin.ListTopics()
	if err != nil {
		return fmt.Errorf("ListTopics: %w", err)
	}
	d, ok := topics[s.topic]
	if !ok || d.NumPartitions < compat.Partitions {
		return fmt.Errorf("ListTopics: %s listed %v with %+v", s.topic, ok, d)
	}
	return nil
}

func (s *state) describe(name string) (string, sarama.ConfigSource, error) {
	entries, err := s.admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: s.topic})
	if err != nil {
		return "", 0, fmt.Errorf("DescribeConfigs: %w", err)
	}
	for _, e := range entries {
		if e.Name == name {
			return e.Value, e.Source, nil
		}
	}
	return "", 0, fmt.Errorf("%s not described", name)
}

func (s *state) configs(ctx context.Context) error {
	for _, name := range []string{"retention.ms", "retention.bytes", "segment.bytes", "cleanup.policy", "max.message.bytes"} {
		if _, _, err := s.describe(name); err != nil {
			return err
		}
	}
	if v, src, _ := s.describe("retention.bytes"); v != "1073741824" || src != sarama.SourceTopic {
		return fmt.Errorf("retention.bytes given at creation described as %q (%s)", v, src)
	}
	if v, _, _ := s.describe("retention.ms"); v != "604800000" {
		return fmt.Errorf("default retention.ms described as %q", v)
	}
	set := map[string]sarama.IncrementalAlterConfigsEntry{"retention.ms": {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: ptr("3600000")}}
	if err := s.admin.IncrementalAlterConfig(sarama.TopicResource, s.topic, set, false); err != nil {
		return fmt.Errorf("IncrementalAlterConfigs SET retention.ms: %w", err)
	}
	if err := s.waitConfig("retention.ms", "3600000"); err != nil {
		return err
	}
	del := map[string]sarama.IncrementalAlterConfigsEntry{"retention.ms": {Operation: sarama.IncrementalAlterConfigsOperationDelete}}
	if err := s.admin.IncrementalAlterConfig(sarama.TopicResource, s.topic, del, false); err != nil {
		return fmt.Errorf("IncrementalAlterConfigs DELETE retention.ms: %w", err)
	}
	if err := s.waitConfig("retention.ms", "604800000"); err != nil {
		return err
	}
	// The legacy AlterConfigs (replaces the topic's whole dynamic config).
	if err := s.admin.AlterConfig(sarama.TopicResource, s.topic, map[string]*string{"retention.bytes": ptr("2147483648")}, false); err != nil {
		return fmt.Errorf("AlterConfigs retention.bytes: %w", err)
	}
	if err := s.waitConfig("retention.bytes", "2147483648"); err != nil {
		return err
	}
	bad := map[string]sarama.IncrementalAlterConfigsEntry{"retention.ms": {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: ptr("soon")}}
	if err := s.admin.IncrementalAlterConfig(sarama.TopicResource, s.topic, bad, false); !errors.Is(err, sarama.ErrInvalidConfig) {
		return fmt.Errorf("retention.ms=soon answered %v, want INVALID_CONFIG", err)
	}
	return nil
}

func (s *state) waitConfig(name, want string) error {
	return compat.WaitUntil(10*time.Second, fmt.Sprintf("%s described as %s", name, want), func() (bool, error) {
		v, _, err := s.describe(name)
		if err != nil {
			return false, err
		}
		return v == want, fmt.Errorf("described as %q", v)
	})
}

func (s *state) createPartitions(ctx context.Context) error {
	if err := s.admin.CreatePartitions(s.topic, compat.Partitions+1, nil, false); err != nil {
		return fmt.Errorf("CreatePartitions: %w", err)
	}
	return s.waitKnownEverywhere(compat.Partitions + 1)
}

func (s *state) deleteRecords(ctx context.Context) error {
	if err := s.admin.DeleteRecords(s.topic, map[int32]int64{0: 5}); err != nil {
		return fmt.Errorf("DeleteRecords: %w", err)
	}
	cl, err := sarama.NewClient(s.o.Bootstrap, s.config("offsets"))
	if err != nil {
		return err
	}
	defer cl.Close()
	if o, err := cl.GetOffset(s.topic, 0, sarama.OffsetOldest); err != nil || o != 5 {
		return fmt.Errorf("oldest offset of p0 after DeleteRecords: %d (%v), want 5", o, err)
	}
	if err := s.admin.DeleteRecords(s.topic, map[int32]int64{0: s.counts[0] + 100}); err == nil || !strings.Contains(err.Error(), sarama.ErrOffsetOutOfRange.Error()) {
		return fmt.Errorf("DeleteRecords past the end answered %v, want OFFSET_OUT_OF_RANGE", err)
	}
	return nil
}

func (s *state) describeCluster(ctx context.Context) error {
	if err := s.needAdmin(); err != nil {
		return err
	}
	brokers, controller, err := s.admin.DescribeCluster()
	if err != nil {
		return fmt.Errorf("DescribeCluster: %w", err)
	}
	addrs := map[string]bool{}
	ids := map[int32]bool{}
	for _, b := range brokers {
		addrs[b.Addr()] = true
		ids[b.ID()] = true
	}
	for _, a := range s.o.Bootstrap {
		if !addrs[a] {
			return fmt.Errorf("broker %s not among the described %v", a, addrs)
		}
	}
	if len(brokers) != len(s.o.Bootstrap) {
		return fmt.Errorf("%d brokers described, bootstrap has %d", len(brokers), len(s.o.Bootstrap))
	}
	if !ids[controller] {
		return fmt.Errorf("controller id %d is none of the brokers %v", controller, ids)
	}
	return nil
}

func (s *state) listDescribeGroups(ctx context.Context) error {
	groups, err := s.admin.ListConsumerGroups()
	if err != nil {
		return fmt.Errorf("ListGroups: %w", err)
	}
	if groups[s.group] != "consumer" {
		return fmt.Errorf("ListGroups: %s has protocol type %q (listed: %v)", s.group, groups[s.group], groups)
	}
	desc, err := s.admin.DescribeConsumerGroups([]string{s.group})
	if err != nil {
		return fmt.Errorf("DescribeGroups: %w", err)
	}
	if len(desc) != 1 || desc[0].Err != sarama.ErrNoError || desc[0].State != "Empty" || desc[0].ProtocolType != "consumer" || len(desc[0].Members) != 0 {
		return fmt.Errorf("DescribeGroups %s: %+v; want Empty, consumer, no members", s.group, desc)
	}
	if err := s.checkCommitted(); err != nil {
		return err
	}
	if err := s.admin.DeleteConsumerGroup(s.group); err != nil {
		return fmt.Errorf("DeleteGroups: %w", err)
	}
	return compat.WaitUntil(10*time.Second, s.group+" gone from ListGroups", func() (bool, error) {
		groups, err := s.admin.ListConsumerGroups()
		if err != nil {
			return false, err
		}
		_, still := groups[s.group]
		return !still, nil
	})
}

// transactions: a transactional producer commits 10 records and aborts 10; a read_committed
// consumer reads the 10 committed ones.
func (s *state) transactions(ctx context.Context) error {
	if err := s.needAdmin(); err != nil {
		return err
	}
	topic := s.topic + "-txn"
	if err := s.admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false); err != nil {
		return fmt.Errorf("CreateTopic %s: %w", topic, err)
	}
	defer s.admin.DeleteTopic(topic) //nolint:errcheck
	c := s.config("txn-producer")
	c.Producer.Idempotent = true
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Net.MaxOpenRequests = 1
	c.Producer.Return.Successes = true
	c.Producer.Transaction.ID = "compat-sarama-txn-" + s.run
	p, err := sarama.NewSyncProducer(s.o.Bootstrap, c)
	if err != nil {
		return fmt.Errorf("NewSyncProducer (transactional): %w", err)
	}
	defer p.Close()
	for i, commit := range []bool{true, false} {
		if err := p.BeginTxn(); err != nil {
			return fmt.Errorf("BeginTxn: %w", err)
		}
		for j := 0; j < 10; j++ {
			if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(fmt.Sprintf("txn%d-%d", i, j))}); err != nil {
				_ = p.AbortTxn()
				return fmt.Errorf("send in a transaction: %w", err)
			}
		}
		if commit {
			err = p.CommitTxn()
		} else {
			err = p.AbortTxn()
		}
		if err != nil {
			return fmt.Errorf("end transaction: %w", err)
		}
	}
	cc := s.config("txn-consumer")
	cc.Consumer.IsolationLevel = sarama.ReadCommitted
	cons, err := sarama.NewConsumer(s.o.Bootstrap, cc)
	if err != nil {
		return err
	}
	defer cons.Close()
	pc, err := cons.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		return err
	}
	defer pc.Close()
	var values []string
	timeout := time.After(5 * time.Second)
loop:
	for {
		select {
		case m := <-pc.Messages():
			values = append(values, string(m.Value))
		case <-timeout:
			break loop
		case <-ctx.Done():
			break loop
		}
	}
	want := []string{}
	for j := 0; j < 10; j++ {
		want = append(want, fmt.Sprintf("txn0-%d", j))
	}
	if strings.Join(values, ",") != strings.Join(want, ",") {
		return fmt.Errorf("read_committed consumer read %v, want %v", values, want)
	}
	return nil
}

func (s *state) deleteTopic(ctx context.Context) error {
	if err := s.admin.DeleteTopic(s.topic); err != nil {
		return fmt.Errorf("DeleteTopic: %w", err)
	}
	err := compat.WaitUntil(30*time.Second, s.topic+" to leave the topic list", func() (bool, error) {
		topics, err := s.admin.ListTopics()
		if err != nil {
			return false, err
		}
		_, still := topics[s.topic]
		return !still, nil
	})
	if err != nil {
		return err
	}
	if err := s.admin.DeleteTopic(s.topic); !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		return fmt.Errorf("deleting %s again answered %v, want UNKNOWN_TOPIC_OR_PARTITION", s.topic, err)
	}
	return nil
}

func ptr(s string) *string { return &s }
