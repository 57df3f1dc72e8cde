// The sarama client of tests/e2e/test_sarama.py: Go's most used Kafka client, as Debian
// ships it (golang-github-shopify-sarama-dev), built by `make test` into build/.
//
//	sarama-client produce BOOTSTRAP TOPIC COUNT CODEC     (BOOTSTRAP: host:port[,host:port...])
//	    an idempotent SyncProducer (acks all) sends COUNT keyed records with a header in
//	    batches of 100; prints {"records": [[i, partition, offset], ...]}
//	sarama-client group BOOTSTRAP TOPIC GROUP EXPECTED
//	    two members of one consumer group read until EXPECTED records arrived between them,
//	    marking each, then close (which commits); prints the records and each member's
//	    partitions: {"records": [[partition, offset, key, value, header], ...], "members": [[...], [...]]}
//	sarama-client admin BOOTSTRAP TOPIC GROUP
//	    ClusterAdmin and client calls an operator's tool makes, from creating TOPIC to
//	    deleting it (admin.go); prints {"<call>": {"error": "", "value": ...}, ...}
//
// Everything but what a feature needs (Version, acks, idempotence) keeps sarama's defaults,
// its timeouts included. The last line of stdout is the JSON answer; errors go to stderr
// with a non-zero exit.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Shopify/sarama"
)

func config() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V2_1_0_0 // without it sarama speaks Kafka 0.8.2, which Kafka 4 refuses too
	c.ClientID = "sarama-e2e"
	return c
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func answer(v interface{}) {
	out, err := json.Marshal(v)
	if err != nil {
		fail("json: %v", err)
	}
	fmt.Println(string(out))
}

var codecs = map[string]sarama.CompressionCodec{
	"none": sarama.CompressionNone, "gzip": sarama.CompressionGZIP,
	"snappy": sarama.CompressionSnappy, "lz4": sarama.CompressionLZ4,
	"zstd": sarama.CompressionZSTD,
}

func produce(bootstrap, topic string, count int, codec string) {
	c := config()
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Idempotent = true
	c.Net.MaxOpenRequests = 1 // what sarama requires of an idempotent producer
	c.Producer.Return.Successes = true
	compression, ok := codecs[codec]
	if !ok {
		fail("unknown codec %q", codec)
	}
	c.Producer.Compression = compression
	producer, err := sarama.NewSyncProducer(strings.Split(bootstrap, ","), c)
	if err != nil {
		fail("producer: %v", err)
	}
	records := make([][3]int64, 0, count)
	for start := 0; start < count; start += 100 {
		batch := []*sarama.ProducerMessage{}
		for i := start; i < count && i < start+100; i++ {
			batch = append(batch, &sarama.ProducerMessage{
				Topic:    topic,
				Key:      sarama.StringEncoder("k-" + strconv.Itoa(i)),
				Value:    sarama.StringEncoder("v-" + strconv.Itoa(i)),
				Headers:  []sarama.RecordHeader{{Key: []byte("i"), Value: []byte(strconv.Itoa(i))}},
				Metadata: i,
			})
		}
		if err := producer.SendMessages(batch); err != nil {
			fail("send: %v", err)
		}
		for _, m := range batch {
			records = append(records, [3]int64{int64(m.Metadata.(int)), int64(m.Partition), m.Offset})
		}
	}
	if err := producer.Close(); err != nil {
		fail("close: %v", err)
	}
	answer(map[string]interface{}{"records": records})
}

// collected is what the group's members read between them.
type collected struct {
	mu      sync.Mutex
	records [][]interface{}
	got     chan struct{}
}

// member is one consumer of the group; its handler records what it reads and marks it.
type member struct {
	all        *collected
	mu         sync.Mutex
	partitions map[int32]bool
}

func (m *member) Setup(s sarama.ConsumerGroupSession) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ps := range s.Claims() {
		for _, p := range ps {
			m.partitions[p] = true
		}
	}
	return nil
}

func (m *member) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (m *member) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for msg := range claim.Messages() {
		header := ""
		for _, h := range msg.Headers {
			if string(h.Key) == "i" {
				header = string(h.Value)
			}
		}
		m.all.mu.Lock()
		m.all.records = append(m.all.records,
			[]interface{}{msg.Partition, msg.Offset, string(msg.Key), string(msg.Value), header})
		m.all.mu.Unlock()
		s.MarkMessage(msg, "")
		m.all.got <- struct{}{}
	}
	return nil
}

func group(bootstrap, topic, groupID string, expected int) {
	all := &collected{records: [][]interface{}{}, got: make(chan struct{}, expected+10000)}
	ctx, cancel := context.WithCancel(context.Background())
	members := []*member{}
	groups := []sarama.ConsumerGroup{}
	var wg sync.WaitGroup
	for n := 0; n < 2; n++ {
		c := config()
		c.Consumer.Offsets.Initial = sarama.OffsetOldest
		c.Consumer.Return.Errors = true
		g, err := sarama.NewConsumerGroup(strings.Split(bootstrap, ","), groupID, c)
		if err != nil {
			fail("group: %v", err)
		}
		m := &member{all: all, partitions: map[int32]bool{}}
		members, groups = append(members, m), append(groups, g)
		wg.Add(2)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil { // Consume returns at each rebalance
				if err := g.Consume(ctx, []string{topic}, m); err != nil && ctx.Err() == nil {
					fail("consume: %v", err)
				}
			}
		}()
		go func() {
			defer wg.Done()
			for err := range g.Errors() {
				fail("group error: %v", err)
			}
		}()
	}
	deadline := time.After(120 * time.Second)
	for n := 0; n < expected; n++ {
		select {
		case <-all.got:
		case <-deadline:
			fail("read %d of %d records in 120 s", n, expected)
		}
	}
	cancel()
	for _, g := range groups {
		if err := g.Close(); err != nil { // the last marks are committed here
			fail("close: %v", err)
		}
	}
	wg.Wait()
	assigned := [][]int32{}
	for _, m := range members {
		ps := []int32{}
		for p := range m.partitions {
			ps = append(ps, p)
		}
		sort.Slice(ps, func(a, b int) bool { return ps[a] < ps[b] })
		assigned = append(assigned, ps)
	}
	answer(map[string]interface{}{"records": all.records, "members": assigned})
}

func main() {
	args := 6
	if len(os.Args) > 1 && os.Args[1] == "admin" {
		args = 5
	}
	if len(os.Args) != args {
		fail("usage: sarama-client produce|group|admin BOOTSTRAP TOPIC COUNT|GROUP [CODEC|EXPECTED]")
	}
	switch os.Args[1] {
	case "produce":
		count, err := strconv.Atoi(os.Args[4])
		if err != nil {
			fail("count: %v", err)
		}
		produce(os.Args[2], os.Args[3], count, os.Args[5])
	case "group":
		expected, err := strconv.Atoi(os.Args[5])
		if err != nil {
			fail("expected: %v", err)
		}
		group(os.Args[2], os.Args[3], os.Args[4], expected)
	case "admin":
		admin(os.Args[2], os.Args[3], os.Args[4])
	default:
		fail("unknown flow %q", os.Args[1])
	}
}
