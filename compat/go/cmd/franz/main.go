// Command franz runs the compatibility steps with franz-go (kgo) and its admin package (kadm)
// against one broker, and prints one JSON line per step (compat/python/test_go_clients.py).
//
// Steps, on one 3-partition topic: create it (kadm) -> produce 10,000 keyed records with
// headers and explicit timestamps, idempotently with acks=all (franz-go's defaults plus
// AllISRAcks) -> read them all back with assigned partitions from the start -> list offsets
// (start, end, by time, max timestamp) -> consume in a classic group and in a KIP-848
// (`consumer` protocol) group, each committing, a second member resuming at the commit ->
// admin: describe topics, describe/alter configs, create partitions, delete records, describe
// cluster, list/describe groups, delete groups -> a share group (KIP-932) -> a transaction ->
// delete the topic.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"sluice/compat/go/internal/compat"
)

const client = "franz-go"

type state struct {
	o         compat.Options
	topic     string
	run       string
	records   []compat.Rec
	got       []compat.Got
	counts    map[int32]int64 // records per partition (the group steps add to them)
	delivered map[int]compat.Where
	groups    map[string]string
	adm       *kadm.Client
	admKgo    *kgo.Client
	mu        sync.Mutex
	extraSeq  int // seqs of records produced after the first 10,000
}

func main() {
	o := compat.ParseOptions()
	s := &state{o: o, topic: compat.TopicName("franz"), groups: map[string]string{}}
	s.run = s.topic[strings.LastIndex(s.topic, "-")+1:]
	if !o.List {
		var err error
		s.admKgo, err = kgo.NewClient(s.opts("admin")...)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		defer s.admKgo.Close()
		s.adm = kadm.NewClient(s.admKgo)
	}
	compat.Run(client, o, []compat.Step{
		{Name: "create_topic", Run: s.createTopic},
		{Name: "produce_idempotent", Needs: []string{"create_topic"}, Run: s.produce},
		{Name: "read_back", Needs: []string{"produce_idempotent"}, Run: s.readBack},
		{Name: "list_offsets", Needs: []string{"read_back"}, Run: s.listOffsets},
		{Name: "group_classic", Needs: []string{"read_back"}, Run: func(ctx context.Context) error { return s.group(ctx, "classic") }},
		{Name: "group_consumer_protocol", Needs: []string{"read_back"}, Run: func(ctx context.Context) error { return s.group(ctx, "consumer") }},
		{Name: "describe_topics", Needs: []string{"create_topic"}, Run: s.describeTopics},
		{Name: "configs", Needs: []string{"create_topic"}, Run: s.configs},
		{Name: "create_partitions", Needs: []string{"create_topic"}, Run: s.createPartitions},
		{Name: "delete_records", Needs: []string{"read_back"}, Run: s.deleteRecords},
		{Name: "describe_cluster", Run: s.describeCluster},
		{Name: "list_describe_groups", Needs: []string{"group_classic"}, Run: s.listDescribeGroups},
		{Name: "share_group", Run: s.shareGroup},
		{Name: "transactions", Run: s.transactions},
		{Name: "delete_topic", Needs: []string{"create_topic"}, Run: s.deleteTopic},
	})
}

// opts are the options of every client this program makes; role names it in client.id
// (compat-franz-ROLE-RUN, as the Python tests name theirs).
func (s *state) opts(role string, extra ...kgo.Opt) []kgo.Opt {
	return append([]kgo.Opt{
		kgo.SeedBrokers(s.o.Bootstrap...),
		kgo.ClientID(fmt.Sprintf("compat-franz-%s-%s", role, s.run)),
		kgo.RequestTimeoutOverhead(10 * time.Second),
	}, extra...)
}

func (s *state) createTopic(ctx context.Context) error {
	resp, err := s.adm.CreateTopic(ctx, compat.Partitions, 1, map[string]*string{"retention.bytes": ptr("1073741824")}, s.topic)
	if err != nil {
		return fmt.Errorf("CreateTopic: %w", err)
	}
	if resp.Err != nil {
		return fmt.Errorf("CreateTopic %s: %w (%s)", s.topic, resp.Err, resp.ErrMessage)
	}
	if resp.NumPartitions != compat.Partitions || resp.ReplicationFactor != 1 {
		return fmt.Errorf("CreateTopic answered %d partitions, replication factor %d", resp.NumPartitions, resp.ReplicationFactor)
	}
	// Creating it again: TOPIC_ALREADY_EXISTS.
	again, err := s.adm.CreateTopic(ctx, compat.Partitions, 1, nil, s.topic)
	if err == nil && !errors.Is(again.Err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("creating %s again answered %v, want TOPIC_ALREADY_EXISTS", s.topic, again.Err)
	}
	return s.waitKnownEverywhere(ctx, compat.Partitions)
}

// waitKnownEverywhere waits until Metadata through each bootstrap broker alone lists the topic
// with n partitions and leaders (with several brokers, each learns of a topic created through
// another within its catalog refresh; see compat/README.md, cluster mode).
func (s *state) waitKnownEverywhere(ctx context.Context, n int) error {
	for _, addr := range s.o.Bootstrap {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ClientID("compat-franz-topic-known-"+s.run))
		if err != nil {
			return err
		}
		adm := kadm.NewClient(cl)
		err = compat.WaitUntil(30*time.Second, fmt.Sprintf("%s with %d partitions in Metadata through %s", s.topic, n, addr), func() (bool, error) {
			md, err := adm.Metadata(ctx, s.topic)
			if err != nil {
				return false, err
			}
			t, ok := md.Topics[s.topic]
			if !ok || t.Err != nil || len(t.Partitions) != n {
				return false, nil
			}
			for _, p := range t.Partitions {
				if p.Leader < 0 || p.Err != nil {
					return false, nil
				}
			}
			return true, nil
		})
		cl.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func toKgo(topic string, r compat.Rec) *kgo.Record {
	hs := make([]kgo.RecordHeader, len(r.Headers))
	for i, h := range r.Headers {
		hs[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
	}
	return &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Headers: hs, Timestamp: time.UnixMilli(r.TimestampMs)}
}

func fromKgo(r *kgo.Record) compat.Got {
	hs := make([]compat.Header, len(r.Headers))
	for i, h := range r.Headers {
		hs[i] = compat.Header{Key: h.Key, Value: h.Value}
	}
	return compat.Got{
		Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Headers: hs,
		TimestampMs: r.Timestamp.UnixMilli(), CreateTime: r.Attrs.TimestampType() == 0,
	}
}

// produce sends records with an idempotent producer (franz-go's default) and acks=all, and
// returns where each landed, by seq.
func (s *state) produceRecords(ctx context.Context, role string, recs []compat.Rec) (map[int]compat.Where, error) {
	cl, err := kgo.NewClient(s.opts(role, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(5*time.Millisecond))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	delivered := map[int]compat.Where{}
	var errs []string
	var mu sync.Mutex
	for _, r := range recs {
		seq := r.Seq
		cl.Produce(ctx, toKgo(s.topic, r), func(rec *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Sprintf("seq %d: %v", seq, err))
				return
			}
			delivered[seq] = compat.Where{Partition: rec.Partition, Offset: rec.Offset}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return nil, fmt.Errorf("flush: %w", err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%d produce errors, e.g. %s", len(errs), strings.Join(errs[:min(3, len(errs))], "; "))
	}
	return delivered, nil
}

func (s *state) produce(ctx context.Context) error {
	s.records = compat.MakeRecords(client, compat.NowMs()-3_600_000, compat.NRecords)
	delivered, err := s.produceRecords(ctx, "producer", s.records)
	if err != nil {
		return err
	}
	if len(delivered) != len(s.records) {
		return fmt.Errorf("%d acknowledgements for %d records", len(delivered), len(s.records))
	}
	s.counts = map[int32]int64{}
	for _, w := range delivered {
		s.counts[w.Partition]++
	}
	s.delivered = delivered
	return nil
}

// readAll reads the topic's partitions from the start up to the given end offsets.
func (s *state) readAll(ctx context.Context, ends map[int32]int64) ([]compat.Got, error) {
	start := map[int32]kgo.Offset{}
	for p := range ends {
		start[p] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(s.opts("consumer", kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.topic: start}))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var got []compat.Got
	next := map[int32]int64{}
	done := func() bool {
		for p, end := range ends {
			if next[p] < end {
				return false
			}
		}
		return true
	}
	for !done() {
		if ctx.Err() != nil {
			return got, fmt.Errorf("read %d records, next offsets %v of %v: %w", len(got), next, ends, ctx.Err())
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		for _, fe := range fs.Errors() {
			if !errors.Is(fe.Err, context.DeadlineExceeded) {
				return got, fmt.Errorf("fetch error p%d: %w", fe.Partition, fe.Err)
			}
		}
		fs.EachRecord(func(r *kgo.Record) {
			got = append(got, fromKgo(r))
			next[r.Partition] = r.Offset + 1
		})
	}
	return got, nil
}

func (s *state) readBack(ctx context.Context) error {
	got, err := s.readAll(ctx, s.counts)
	if err != nil {
		return err
	}
	if err := compat.CheckReadBack(s.records, got, s.delivered, compat.Partitions); err != nil {
		return err
	}
	s.got = got
	return nil
}

func (s *state) listOffsets(ctx context.Context) error {
	starts, err := s.adm.ListStartOffsets(ctx, s.topic)
	if err != nil {
		return fmt.Errorf("ListStartOffsets: %w", err)
	}
	ends, err := s.adm.ListEndOffsets(ctx, s.topic)
	if err != nil {
		return fmt.Errorf("ListEndOffsets: %w", err)
	}
	for p := int32(0); p < compat.Partitions; p++ {
		st, ok1 := starts.Lookup(s.topic, p)
		en, ok2 := ends.Lookup(s.topic, p)
		if !ok1 || !ok2 || st.Err != nil || en.Err != nil {
			return fmt.Errorf("partition %d: start %+v, end %+v", p, st, en)
		}
		if st.Offset != 0 || en.Offset != s.counts[p] {
			return fmt.Errorf("partition %d: start %d, end %d; want 0 and %d", p, st.Offset, en.Offset, s.counts[p])
		}
	}
	for _, l := range compat.OffsetLookups(s.got) {
		at, err := s.adm.ListOffsetsAfterMilli(ctx, l.Ts, s.topic)
		if err != nil {
			return fmt.Errorf("ListOffsetsAfterMilli(%s): %w", l.Label, err)
		}
		for p := int32(0); p < compat.Partitions; p++ {
			o, _ := at.Lookup(s.topic, p)
			want := compat.ExpectedOffsetForTime(s.got, p, l.Ts)
			if want < 0 {
				want = s.counts[p] // kadm: no record at or after ts -> the end offset
			}
			if o.Err != nil || o.Offset != want {
				return fmt.Errorf("offset for time %s (ts %d) partition %d: %d (%v), want %d", l.Label, l.Ts, p, o.Offset, o.Err, want)
			}
		}
	}
	// KIP-734: max timestamp (-3). Timestamps grow with offsets here, so it is the last record.
	maxes, err := s.adm.ListMaxTimestampOffsets(ctx, s.topic)
	if err != nil {
		return fmt.Errorf("ListMaxTimestampOffsets: %w", err)
	}
	for p := int32(0); p < compat.Partitions; p++ {
		o, _ := maxes.Lookup(s.topic, p)
		if o.Err != nil || o.Offset != s.counts[p]-1 {
			return fmt.Errorf("max timestamp offset partition %d: %d (%v), want %d", p, o.Offset, o.Err, s.counts[p]-1)
		}
	}
	return nil
}

// group: a member of a new group (classic, or KIP-848 with the broker assigning) subscribes,
// reads every record once and commits; the committed offsets are the end offsets; 30 more
// records are produced; a second member of the group reads exactly those (nothing committed is
// read again) and commits; for KIP-848 the group is listed as a `consumer` group.
func (s *state) group(ctx context.Context, protocol string) error {
	group := fmt.Sprintf("compat-franz-%s-%s", protocol, s.run)
	s.mu.Lock()
	s.groups[protocol] = group
	s.mu.Unlock()
	member := func(role string) (*kgo.Client, error) {
		opts := []kgo.Opt{kgo.ConsumerGroup(group), kgo.ConsumeTopics(s.topic), kgo.DisableAutoCommit(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}
		if protocol == "consumer" {
			opts = append(opts, kgo.ServerSideBalancer(), kgo.Balancers(kgo.StickyBalancer()))
		}
		return kgo.NewClient(s.opts(role, opts...)...)
	}
	consume := func(cl *kgo.Client, want int) ([]compat.Got, error) {
		var got []compat.Got
		seen := map[int]bool{}
		for len(seen) < want {
			if ctx.Err() != nil {
				return got, fmt.Errorf("group member read %d of %d records: %w", len(seen), want, ctx.Err())
			}
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			fs := cl.PollFetches(pctx)
			cancel()
			for _, fe := range fs.Errors() {
				if !errors.Is(fe.Err, context.DeadlineExceeded) {
					return got, fmt.Errorf("poll: %w", fe.Err)
				}
			}
			fs.EachRecord(func(r *kgo.Record) {
				g := fromKgo(r)
				got = append(got, g)
				seen[compat.SeqOf(g)] = true
			})
		}
		return got, nil
	}

	s.mu.Lock()
	total := int64(0)
	ends := map[int32]int64{}
	for p, n := range s.counts {
		total += n
		ends[p] = n
	}
	s.mu.Unlock()
	first, err := member("member1")
	if err != nil {
		return err
	}
	got, err := consume(first, int(total))
	if err == nil {
		err = first.CommitUncommittedOffsets(ctx)
	}
	first.Close() // leaves the group
	if err != nil {
		return fmt.Errorf("first member: %w", err)
	}
	if int64(len(got)) != total {
		return fmt.Errorf("first member read %d records, want %d (duplicates?)", len(got), total)
	}
	committed, err := s.adm.FetchOffsets(ctx, group)
	if err != nil {
		return fmt.Errorf("FetchOffsets: %w", err)
	}
	for p := int32(0); p < compat.Partitions; p++ {
		c, ok := committed.Lookup(s.topic, p)
		if !ok || c.Err != nil || c.At != ends[p] {
			return fmt.Errorf("committed offset of partition %d: %+v, want %d", p, c, ends[p])
		}
	}

	// 30 more records; the next member must read exactly these.
	s.mu.Lock()
	base := len(s.records) + s.extraSeq
	s.extraSeq += 30
	s.mu.Unlock()
	more := compat.MakeRecords(client, compat.NowMs(), base+30)[base:]
	delivered, err := s.produceRecords(ctx, "producer-"+protocol, more)
	if err != nil {
		return fmt.Errorf("producing 30 more: %w", err)
	}
	second, err := member("member2")
	if err != nil {
		return err
	}
	got2, err := consume(second, 30)
	if err == nil {
		err = second.CommitUncommittedOffsets(ctx)
	}
	second.Close()
	if err != nil {
		return fmt.Errorf("second member: %w", err)
	}
	for _, g := range got2 {
		seq := compat.SeqOf(g)
		if seq < base || seq >= base+30 {
			return fmt.Errorf("second member read seq %d at p%d@%d: a record committed by the first", seq, g.Partition, g.Offset)
		}
		if d := delivered[seq]; d != (compat.Where{Partition: g.Partition, Offset: g.Offset}) {
			return fmt.Errorf("second member read seq %d at p%d@%d, producer was told %v", seq, g.Partition, g.Offset, d)
		}
	}
	if len(got2) != 30 {
		return fmt.Errorf("second member read %d records, want the 30 new ones", len(got2))
	}
	s.mu.Lock()
	for _, w := range delivered {
		s.counts[w.Partition]++
	}
	s.mu.Unlock()

	want := "classic"
	if protocol == "consumer" {
		want = "consumer"
	}
	return compat.WaitUntil(10*time.Second, fmt.Sprintf("group %s listed as a %s group", group, want), func() (bool, error) {
		listed, err := s.adm.ListGroups(ctx)
		if err != nil {
			return false, err
		}
		g, ok := listed[group]
		if !ok {
			return false, fmt.Errorf("not listed")
		}
		if g.GroupType != "" && g.GroupType != want {
			return false, fmt.Errorf("listed as a %q group (franz-go fell back to the classic protocol?)", g.GroupType)
		}
		return g.GroupType == want, nil
	})
}

func (s *state) describeTopics(ctx context.Context) error {
	md, err := s.adm.Metadata(ctx, s.topic)
	if err != nil {
		return err
	}
	t, ok := md.Topics[s.topic]
	if !ok || t.Err != nil {
		return fmt.Errorf("topic %s: %+v", s.topic, t)
	}
	if t.ID == (kadm.TopicID{}) {
		return fmt.Errorf("topic id is zero")
	}
	if len(t.Partitions) < compat.Partitions {
		return fmt.Errorf("%d partitions", len(t.Partitions))
	}
	brokers := map[int32]bool{}
	for _, b := range md.Brokers {
		brokers[b.NodeID] = true
	}
	for _, p := range t.Partitions {
		if !brokers[p.Leader] || len(p.Replicas) != 1 || p.Replicas[0] != p.Leader || len(p.ISR) != 1 || p.ISR[0] != p.Leader {
			return fmt.Errorf("partition %d: leader %d, replicas %v, ISR %v (brokers %v)", p.Partition, p.Leader, p.Replicas, p.ISR, brokers)
		}
	}
	if md.Cluster == "" {
		return fmt.Errorf("no cluster id in Metadata")
	}
	listed, err := s.adm.ListTopics(ctx)
	if err != nil {
		return err
	}
	if !listed.Has(s.topic) {
		return fmt.Errorf("ListTopics does not list %s", s.topic)
	}
	return nil
}

func configValue(rc kadm.ResourceConfigs, topic, name string) (kadm.Config, error) {
	r, err := rc.On(topic, nil)
	if err != nil {
		return kadm.Config{}, err
	}
	if r.Err != nil {
		return kadm.Config{}, fmt.Errorf("%w (%s)", r.Err, r.ErrMessage)
	}
	for _, c := range r.Configs {
		if c.Key == name {
			return c, nil
		}
	}
	return kadm.Config{}, fmt.Errorf("%s not described", name)
}

func (s *state) configs(ctx context.Context) error {
	rc, err := s.adm.DescribeTopicConfigs(ctx, s.topic)
	if err != nil {
		return fmt.Errorf("DescribeTopicConfigs: %w", err)
	}
	for _, name := range []string{"retention.ms", "retention.bytes", "segment.bytes", "cleanup.policy", "max.message.bytes"} {
		if _, err := configValue(rc, s.topic, name); err != nil {
			return err
		}
	}
	c, _ := configValue(rc, s.topic, "retention.bytes")
	if c.MaybeValue() != "1073741824" || c.Source.String() != "DYNAMIC_TOPIC_CONFIG" {
		return fmt.Errorf("retention.bytes given at creation described as %q (%s)", c.MaybeValue(), c.Source)
	}
	c, _ = configValue(rc, s.topic, "retention.ms")
	if c.MaybeValue() != "604800000" {
		return fmt.Errorf("default retention.ms described as %q", c.MaybeValue())
	}
	resps, err := s.adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: ptr("3600000")}}, s.topic)
	if err == nil {
		_, err = resps.On(s.topic, nil)
		if err == nil {
			for _, r := range resps {
				if r.Err != nil {
					err = fmt.Errorf("%w (%s)", r.Err, r.ErrMessage)
				}
			}
		}
	}
	if err != nil {
		return fmt.Errorf("IncrementalAlterConfigs SET retention.ms: %w", err)
	}
	if err := s.waitConfig(ctx, "retention.ms", "3600000"); err != nil {
		return err
	}
	resps, err = s.adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: "retention.ms"}}, s.topic)
	if err == nil {
		for _, r := range resps {
			if r.Err != nil {
				err = fmt.Errorf("%w (%s)", r.Err, r.ErrMessage)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("IncrementalAlterConfigs DELETE retention.ms: %w", err)
	}
	if err := s.waitConfig(ctx, "retention.ms", "604800000"); err != nil {
		return err
	}
	// A value that is not a number is refused.
	resps, err = s.adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: ptr("soon")}}, s.topic)
	if err == nil {
		for _, r := range resps {
			err = r.Err
		}
		if !errors.Is(err, kerr.InvalidConfig) {
			return fmt.Errorf("retention.ms=soon answered %v, want INVALID_CONFIG", err)
		}
	}
	return nil
}

func (s *state) waitConfig(ctx context.Context, name, want string) error {
	return compat.WaitUntil(10*time.Second, fmt.Sprintf("%s described as %s", name, want), func() (bool, error) {
		rc, err := s.adm.DescribeTopicConfigs(ctx, s.topic)
		if err != nil {
			return false, err
		}
		c, err := configValue(rc, s.topic, name)
		if err != nil {
			return false, err
		}
		return c.MaybeValue() == want, fmt.Errorf("described as %q", c.MaybeValue())
	})
}

func (s *state) createPartitions(ctx context.Context) error {
	resps, err := s.adm.UpdatePartitions(ctx, compat.Partitions+1, s.topic)
	if err != nil {
		return fmt.Errorf("CreatePartitions: %w", err)
	}
	r, err := resps.On(s.topic, nil)
	if err != nil {
		return err
	}
	if r.Err != nil {
		return fmt.Errorf("CreatePartitions: %w (%s)", r.Err, r.ErrMessage)
	}
	return s.waitKnownEverywhere(ctx, compat.Partitions+1)
}

func (s *state) deleteRecords(ctx context.Context) error {
	o := kadm.Offsets{}
	o.Add(kadm.Offset{Topic: s.topic, Partition: 0, At: 5})
	resps, err := s.adm.DeleteRecords(ctx, o)
	if err != nil {
		return fmt.Errorf("DeleteRecords: %w", err)
	}
	r, ok := resps.Lookup(s.topic, 0)
	if !ok || r.Err != nil || r.LowWatermark != 5 {
		return fmt.Errorf("DeleteRecords p0 to 5: %+v", r)
	}
	starts, err := s.adm.ListStartOffsets(ctx, s.topic)
	if err != nil {
		return err
	}
	if st, _ := starts.Lookup(s.topic, 0); st.Offset != 5 {
		return fmt.Errorf("log start of p0 after DeleteRecords: %d, want 5", st.Offset)
	}
	// Past the end: OFFSET_OUT_OF_RANGE.
	o = kadm.Offsets{}
	o.Add(kadm.Offset{Topic: s.topic, Partition: 0, At: s.counts[0] + 100})
	resps, err = s.adm.DeleteRecords(ctx, o)
	if err == nil {
		r, _ = resps.Lookup(s.topic, 0)
		if !errors.Is(r.Err, kerr.OffsetOutOfRange) {
			return fmt.Errorf("DeleteRecords past the end answered %v, want OFFSET_OUT_OF_RANGE", r.Err)
		}
	}
	return nil
}

func (s *state) describeCluster(ctx context.Context) error {
	md, err := s.adm.BrokerMetadata(ctx)
	if err != nil {
		return err
	}
	if md.Cluster == "" {
		return fmt.Errorf("no cluster id")
	}
	if len(md.Brokers) != len(s.o.Bootstrap) {
		return fmt.Errorf("%d brokers listed, bootstrap has %d", len(md.Brokers), len(s.o.Bootstrap))
	}
	addrs := map[string]bool{}
	for _, b := range md.Brokers {
		addrs[fmt.Sprintf("%s:%d", b.Host, b.Port)] = true
	}
	for _, a := range s.o.Bootstrap {
		if !addrs[a] {
			return fmt.Errorf("broker %s not among the listed %v", a, addrs)
		}
	}
	vs, err := s.adm.ApiVersions(ctx)
	if err != nil {
		return fmt.Errorf("ApiVersions: %w", err)
	}
	for _, v := range vs {
		if v.Err != nil {
			return fmt.Errorf("ApiVersions of broker %d: %w", v.NodeID, v.Err)
		}
	}
	return nil
}

func (s *state) listDescribeGroups(ctx context.Context) error {
	classic := s.groups["classic"]
	listed, err := s.adm.ListGroups(ctx)
	if err != nil {
		return fmt.Errorf("ListGroups: %w", err)
	}
	if _, ok := listed[classic]; !ok {
		return fmt.Errorf("ListGroups does not list %s (lists %v)", classic, listed.Groups())
	}
	described, err := s.adm.DescribeGroups(ctx, classic)
	if err != nil {
		return fmt.Errorf("DescribeGroups: %w", err)
	}
	d, ok := described[classic]
	if !ok || d.Err != nil {
		return fmt.Errorf("DescribeGroups %s: %+v", classic, d)
	}
	if d.State != "Empty" || d.ProtocolType != "consumer" || len(d.Members) != 0 {
		return fmt.Errorf("%s described as state %q, protocol type %q, %d members; want Empty, consumer, 0", classic, d.State, d.ProtocolType, len(d.Members))
	}
	lags, err := s.adm.Lag(ctx, classic)
	if err != nil {
		return fmt.Errorf("Lag: %w", err)
	}
	if l, ok := lags[classic]; !ok || l.Error() != nil {
		return fmt.Errorf("Lag of %s: %v", classic, l.Error())
	}
	if next, ok := s.groups["consumer"]; ok {
		cd, err := s.adm.DescribeConsumerGroups(ctx, next)
		if err != nil {
			return fmt.Errorf("ConsumerGroupDescribe: %w", err)
		}
		if g, ok := cd[next]; !ok || g.Err != nil {
			return fmt.Errorf("ConsumerGroupDescribe %s: %+v", next, g)
		}
	}
	deleted, err := s.adm.DeleteGroup(ctx, classic)
	if err != nil || deleted.Err != nil {
		return fmt.Errorf("DeleteGroups %s: %v %v", classic, err, deleted.Err)
	}
	return compat.WaitUntil(10*time.Second, classic+" gone from ListGroups", func() (bool, error) {
		listed, err := s.adm.ListGroups(ctx)
		if err != nil {
			return false, err
		}
		_, still := listed[classic]
		return !still, nil
	})
}

// shareGroup: a share group (KIP-932) on a topic of its own with 300 records on 2 partitions,
// share.auto.offset.reset=earliest set as a group config; one share consumer reads each
// record once and accepts it.
func (s *state) shareGroup(ctx context.Context) error {
	topic := s.topic + "-share"
	group := "compat-franz-share-" + s.run
	if r, err := s.adm.CreateTopic(ctx, 2, 1, nil, topic); err != nil || r.Err != nil {
		return fmt.Errorf("CreateTopic %s: %v %v", topic, err, r.Err)
	}
	defer s.adm.DeleteTopic(context.Background(), topic) //nolint:errcheck
	cl, err := kgo.NewClient(s.opts("share-producer", kgo.DefaultProduceTopic(topic))...)
	if err != nil {
		return err
	}
	var recs []*kgo.Record
	for i := 0; i < 300; i++ {
		recs = append(recs, &kgo.Record{Key: []byte("k" + strconv.Itoa(i%7)), Value: []byte(strconv.Itoa(i))})
	}
	err = cl.ProduceSync(ctx, recs...).FirstErr()
	cl.Close()
	if err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	// kadm has no call for group configs; IncrementalAlterConfigs on a GROUP resource directly.
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = group
	rc := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	rc.Name, rc.Value, rc.Op = "share.auto.offset.reset", ptr("earliest"), kmsg.IncrementalAlterConfigOpSet
	res.Configs = append(res.Configs, rc)
	req.Resources = append(req.Resources, res)
	alter, err := req.RequestWith(ctx, s.admKgo)
	if err != nil {
		return fmt.Errorf("IncrementalAlterConfigs on group %s: %w", group, err)
	}
	for _, r := range alter.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return fmt.Errorf("IncrementalAlterConfigs on group %s: %w (%v)", group, err, deref(r.ErrorMessage))
		}
	}
	sc, err := kgo.NewClient(s.opts("share-consumer", kgo.ShareGroup(group), kgo.ConsumeTopics(topic))...)
	if err != nil {
		return err
	}
	defer sc.Close()
	seen := map[string]int{}
	for len(seen) < 300 {
		if ctx.Err() != nil {
			return fmt.Errorf("share consumer read %d of 300 records: %w", len(seen), ctx.Err())
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		fs := sc.PollFetches(pctx)
		cancel()
		for _, fe := range fs.Errors() {
			if !errors.Is(fe.Err, context.DeadlineExceeded) {
				return fmt.Errorf("share poll: %w", fe.Err)
			}
		}
		var batch []*kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			seen[fmt.Sprintf("%d/%d", r.Partition, r.Offset)]++
			batch = append(batch, r)
		})
		sc.MarkAcks(kgo.AckAccept, batch...)
	}
	if err := sc.FlushAcks(ctx); err != nil {
		return fmt.Errorf("FlushAcks: %w", err)
	}
	var twice []string
	for k, n := range seen {
		if n > 1 {
			twice = append(twice, k)
		}
	}
	sort.Strings(twice)
	if len(twice) > 0 {
		return fmt.Errorf("%d records delivered more than once, e.g. %v", len(twice), twice[:min(3, len(twice))])
	}
	described, err := s.adm.DescribeShareGroups(ctx, group)
	if err != nil {
		return fmt.Errorf("ShareGroupDescribe: %w", err)
	}
	if g, ok := described[group]; !ok || g.Err != nil {
		return fmt.Errorf("ShareGroupDescribe %s: %+v", group, g)
	}
	return nil
}

// transactions: a transactional producer commits 10 records, aborts 10; a read_committed
// consumer reads the 10 committed ones.
func (s *state) transactions(ctx context.Context) error {
	topic := s.topic + "-txn"
	if r, err := s.adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil || r.Err != nil {
		return fmt.Errorf("CreateTopic %s: %v %v", topic, err, r.Err)
	}
	defer s.adm.DeleteTopic(context.Background(), topic) //nolint:errcheck
	cl, err := kgo.NewClient(s.opts("txn-producer", kgo.TransactionalID("compat-franz-txn-"+s.run), kgo.DefaultProduceTopic(topic),
		kgo.TransactionTimeout(30*time.Second))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for i, commit := range []kgo.TransactionEndTry{kgo.TryCommit, kgo.TryAbort} {
		if err := cl.BeginTransaction(); err != nil {
			return fmt.Errorf("BeginTransaction: %w", err)
		}
		var recs []*kgo.Record
		for j := 0; j < 10; j++ {
			recs = append(recs, &kgo.Record{Value: []byte(fmt.Sprintf("txn%d-%d", i, j))})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			_ = cl.EndTransaction(ctx, kgo.TryAbort)
			return fmt.Errorf("produce in a transaction: %w", err)
		}
		if err := cl.EndTransaction(ctx, commit); err != nil {
			return fmt.Errorf("EndTransaction: %w", err)
		}
	}
	rc, err := kgo.NewClient(s.opts("txn-consumer", kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))...)
	if err != nil {
		return err
	}
	defer rc.Close()
	var values []string
	for len(values) < 10 && ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		fs := rc.PollFetches(pctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) { values = append(values, string(r.Value)) })
	}
	// Anything of the aborted transaction would follow the committed records; wait a moment.
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	rc.PollFetches(pctx).EachRecord(func(r *kgo.Record) { values = append(values, string(r.Value)) })
	cancel()
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
	r, err := s.adm.DeleteTopic(ctx, s.topic)
	if err != nil || r.Err != nil {
		return fmt.Errorf("DeleteTopics: %v %v", err, r.Err)
	}
	err = compat.WaitUntil(30*time.Second, s.topic+" to leave Metadata", func() (bool, error) {
		md, err := s.adm.Metadata(ctx, s.topic)
		if err != nil {
			return false, err
		}
		t, ok := md.Topics[s.topic]
		return !ok || errors.Is(t.Err, kerr.UnknownTopicOrPartition), nil
	})
	if err != nil {
		return err
	}
	again, err := s.adm.DeleteTopic(ctx, s.topic)
	if err == nil && !errors.Is(again.Err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("deleting %s again answered %v, want UNKNOWN_TOPIC_OR_PARTITION", s.topic, again.Err)
	}
	return nil
}

func ptr(s string) *string { return &s }

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
