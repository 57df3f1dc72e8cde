package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/Shopify/sarama"
)

// admin runs the ClusterAdmin and client calls an operator's tool makes, in order, on TOPIC
// (created here) and GROUP (which commits an offset on TOPIC here); prints, per call,
// {"error": "" or what sarama returned, "value": what the call found}. sarama 1.22 sends
// DescribeConfigs and the ACL APIs at v0 whatever its config.Version, and drops the
// per-entry errors of CreateACL, DeleteRecords and DeleteACL's filters: a later call's value
// shows whether such a call did its work.
func admin(bootstrap, topic, groupID string) {
	c := config()
	c.Producer.Return.Successes = true                   // what a SyncProducer needs
	c.Producer.Partitioner = sarama.NewManualPartitioner // records go to the partition named
	c.Producer.RequiredAcks = sarama.WaitForAll          // acknowledged: below the high watermark
	addrs := strings.Split(bootstrap, ",")
	ca, err := sarama.NewClusterAdmin(addrs, c)
	if err != nil {
		fail("admin: %v", err)
	}
	defer ca.Close()
	client, err := sarama.NewClient(addrs, c)
	if err != nil {
		fail("client: %v", err)
	}
	defer client.Close()
	results := map[string]interface{}{}
	var value interface{}
	note := func(name string, err error, value interface{}) {
		text := ""
		if err != nil {
			text = err.Error()
		}
		results[name] = map[string]interface{}{"error": text, "value": value}
	}

	err = ca.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 2, ReplicationFactor: 3,
		ConfigEntries: map[string]*string{"retention.ms": strPtr("86400000")}}, false)
	note("CreateTopic", err, nil)
	meta, err := ca.DescribeTopics([]string{topic})
	described := []interface{}{}
	for _, m := range meta {
		described = append(described, []interface{}{m.Name, int(m.Err), len(m.Partitions)})
	}
	note("DescribeTopics", err, described)
	brokers, controller, err := ca.DescribeCluster()
	note("DescribeCluster", err, []int{len(brokers), int(controller)})
	value, err = listTopic(ca, topic)
	note("ListTopics", err, value)
	err = ca.CreatePartitions(topic, 3, nil, false)
	note("CreatePartitions", err, nil)
	value, err = describeConfig(ca, topic)
	note("DescribeConfig", err, value)
	err = ca.AlterConfig(sarama.TopicResource, topic,
		map[string]*string{"retention.ms": strPtr("3600000")}, false)
	note("AlterConfig", err, nil)
	value, err = describeConfig(ca, topic)
	note("DescribeConfigAfterAlter", err, value)

	// sarama 1.22 sends DeleteRecords to the controller, not to the partition's leader, and
	// drops its per-partition error: Kafka's and raftlog's NOT_LEADER_OR_FOLLOWER from any
	// other broker. The records go to the partition the controller leads.
	target, err := ledByController(client, topic)
	note("LedByController", err, nil)
	producer, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		fail("producer: %v", err)
	}
	for i := 0; i < 5; i++ {
		if _, _, err := producer.SendMessage(&sarama.ProducerMessage{Topic: topic,
			Partition: target, Value: sarama.StringEncoder(fmt.Sprint(i))}); err != nil {
			fail("send: %v", err)
		}
	}
	newest, err := client.GetOffset(topic, target, sarama.OffsetNewest)
	note("GetOffsetNewest", err, newest)
	err = ca.DeleteRecords(topic, map[int32]int64{target: 2})
	note("DeleteRecords", err, nil)
	oldest, err := client.GetOffset(topic, target, sarama.OffsetOldest)
	note("GetOffsetOldest", err, oldest)

	note("CommitOffset", commit(client, topic, groupID, 3), nil)
	groups, err := ca.ListConsumerGroups()
	protocolType, listed := groups[groupID]
	note("ListConsumerGroups", err, []interface{}{listed, protocolType})
	descriptions, err := ca.DescribeConsumerGroups([]string{groupID})
	states := []interface{}{}
	for _, d := range descriptions {
		states = append(states, []interface{}{d.GroupId, int(d.Err), d.State, len(d.Members)})
	}
	note("DescribeConsumerGroups", err, states)
	offsets, err := ca.ListConsumerGroupOffsets(groupID, map[string][]int32{topic: {0, 1}})
	committed := []interface{}{}
	if err == nil {
		for p := int32(0); p < 2; p++ {
			if block := offsets.GetBlock(topic, p); block != nil {
				committed = append(committed, []interface{}{block.Offset, int(block.Err)})
			}
		}
	}
	note("ListConsumerGroupOffsets", err, committed)

	resource := sarama.Resource{ResourceType: sarama.AclResourceTopic, ResourceName: topic,
		ResoucePatternType: sarama.AclPatternLiteral} // sic: sarama 1.22 spells it so
	acl := sarama.Acl{Principal: "User:sarama", Host: "*", Operation: sarama.AclOperationRead,
		PermissionType: sarama.AclPermissionAllow}
	note("CreateACL", ca.CreateACL(resource, acl), nil)
	name := topic
	filter := sarama.AclFilter{ResourceType: sarama.AclResourceTopic, ResourceName: &name,
		ResourcePatternTypeFilter: sarama.AclPatternLiteral, Operation: sarama.AclOperationAny,
		PermissionType: sarama.AclPermissionAny}
	value, err = listAcls(ca, filter)
	note("ListAcls", err, value)
	deleted, err := ca.DeleteACL(filter, false)
	gone := []interface{}{}
	for _, m := range deleted {
		gone = append(gone, []interface{}{int(m.Err), m.ResourceName, m.Principal,
			int(m.Operation)})
	}
	note("DeleteACL", err, gone)
	value, err = listAcls(ca, filter)
	note("ListAclsAfterDelete", err, value)
	note("DeleteTopic", ca.DeleteTopic(topic), nil)
	answer(results)
}

// ledByController is the partition of topic whose leader is the controller ClusterAdmin sends
// DeleteRecords to, asked for up to 10 s (a partition just created may have no leader yet);
// partition 0 and why if none is.
func ledByController(client sarama.Client, topic string) (int32, error) {
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if attempt > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		var controller *sarama.Broker
		var partitions []int32
		if err = client.RefreshMetadata(topic); err != nil {
			continue
		}
		if controller, err = client.Controller(); err != nil {
			continue
		}
		if partitions, err = client.Partitions(topic); err != nil {
			continue
		}
		for _, p := range partitions {
			if leader, e := client.Leader(topic, p); e == nil && leader.ID() == controller.ID() {
				return p, nil
			}
		}
		err = fmt.Errorf("no partition of %s is led by the controller, %d", topic, controller.ID())
	}
	return 0, err
}

// listTopic is ListTopics' entry for topic: partitions, replication factor, and the configs
// it names as set (ListTopics leaves out those a v0 DescribeConfigs says are defaults).
func listTopic(ca sarama.ClusterAdmin, topic string) (interface{}, error) {
	topics, err := ca.ListTopics()
	if err != nil {
		return nil, err
	}
	detail, ok := topics[topic]
	if !ok {
		return nil, nil
	}
	set := map[string]string{}
	for name, value := range detail.ConfigEntries {
		set[name] = *value
	}
	return []interface{}{detail.NumPartitions, detail.ReplicationFactor, set}, nil
}

// describeConfig is what DescribeConfig says of two of topic's configs: retention.ms (set
// on the topic) and cleanup.policy (left at its default), each [value, default?].
func describeConfig(ca sarama.ClusterAdmin, topic string) (interface{}, error) {
	entries, err := ca.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource,
		Name: topic})
	found := map[string]interface{}{}
	for _, e := range entries {
		if e.Name == "retention.ms" || e.Name == "cleanup.policy" {
			found[e.Name] = []interface{}{e.Value, e.Default}
		}
	}
	return found, err
}

// commit commits offset on partition 0 of topic for groupID with an OffsetManager, as a
// consumer outside a group session does (sarama 1.22: OffsetCommit v1, generation -1); its
// Close commits what was marked.
func commit(client sarama.Client, topic, groupID string, offset int64) error {
	om, err := sarama.NewOffsetManagerFromClient(groupID, client)
	if err != nil {
		return err
	}
	pom, err := om.ManagePartition(topic, 0)
	if err != nil {
		om.Close()
		return err
	}
	pom.MarkOffset(offset, "")
	return om.Close()
}

// listAcls is [resource name, pattern type, principal, operation] of each ACL filter matches.
func listAcls(ca sarama.ClusterAdmin, filter sarama.AclFilter) (interface{}, error) {
	resources, err := ca.ListAcls(filter)
	found := []interface{}{}
	for _, r := range resources {
		for _, a := range r.Acls {
			found = append(found, []interface{}{r.ResourceName, int(r.ResoucePatternType),
				a.Principal, int(a.Operation)})
		}
	}
	return found, err
}

func strPtr(s string) *string { return &s }
