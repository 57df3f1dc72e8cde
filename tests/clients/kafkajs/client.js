// kafkajs flows the e2e tests run against a raftlog cluster (tests/e2e/test_kafkajs.py).
// Usage: node client.js <flow> <bootstrap> <topic> ; prints one JSON line on success,
// exits 1 with the error on failure. Default timeouts throughout, as a user would have them.
'use strict'
const { Kafka, logLevel } = require('kafkajs')

const [flow, bootstrap, topic] = process.argv.slice(2)
const kafka = new Kafka({ clientId: `raftlog-${flow}`, brokers: bootstrap.split(','), logLevel: logLevel.WARN })

// Every value a consumer of the group reads until it has `want` (or 60 s pass).
async function consume (groupId, want, options = {}) {
  const consumer = kafka.consumer({ groupId, ...options })
  let joins = 0
  consumer.on(consumer.events.GROUP_JOIN, () => { joins += 1 })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const values = []
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`read ${values.length} of ${want} in 60 s`)), 60000)
    consumer.run({
      eachMessage: async ({ message }) => {
        values.push(message.value.toString())
        if (values.length >= want) { clearTimeout(timer); resolve() }
      }
    }).catch(reject)
  })
  await consumer.disconnect()
  return { values, joins }
}

const messages = (prefix, n) => Array.from({ length: n }, (_, i) => ({ value: `${prefix}-${i}` }))

const flows = {
  // A consumer joining with rebalanceTimeout 0 (what kafkajs's own tests leave it at).
  async join0 () {
    const producer = kafka.producer()
    await producer.connect()
    await producer.send({ topic, messages: messages('v', 30) })
    await producer.disconnect()
    const { values, joins } = await consume(`join0-${topic}`, 30, { rebalanceTimeout: 0, sessionTimeout: 10000 })
    return { consumed: values.length, joins }
  },

  // A transactional producer commits one transaction and aborts another; a read_committed
  // consumer (kafkajs's default) reads the committed one only. A second producer with the
  // same transactional id fences the first.
  async transactions () {
    const id = `kafkajs-${topic}`
    const producer = kafka.producer({ transactionalId: id, idempotent: true, maxInFlightRequests: 1 })
    await producer.connect()
    for (const [prefix, commit] of [['committed', true], ['aborted', false]]) {
      const txn = await producer.transaction()
      await txn.send({ topic, messages: messages(prefix, 10) })
      await (commit ? txn.commit() : txn.abort())
    }
    const zombie = producer
    const successor = kafka.producer({ transactionalId: id, idempotent: true, maxInFlightRequests: 1 })
    await successor.connect()
    const fresh = await successor.transaction()  // InitProducerId: the zombie's epoch is stale
    await fresh.send({ topic, messages: messages('successor', 5) })
    await fresh.commit()
    let fenced = null
    try {
      const stale = await zombie.transaction()
      await stale.send({ topic, messages: messages('zombie', 5) })
      await stale.commit()
    } catch (e) {
      fenced = e.type || e.name
    }
    await successor.disconnect()
    await zombie.disconnect().catch(() => {})
    const { values } = await consume(`reader-${topic}`, 15)
    await new Promise((resolve) => setTimeout(resolve, 3000))  // nothing more arrives
    return { values: values.sort(), fenced }
  },

  // Read-process-write: records consumed from the topic are written to `<topic>-out` and the
  // consumer's offsets sent in the same transaction (sendOffsets), which commits.
  async sendOffsets () {
    const producer = kafka.producer()
    await producer.connect()
    await producer.send({ topic, messages: messages('in', 10) })
    await producer.disconnect()
    const groupId = `rpw-${topic}`
    const consumer = kafka.consumer({ groupId })
    await consumer.connect()
    await consumer.subscribe({ topic, fromBeginning: true })
    const writer = kafka.producer({ transactionalId: `rpw-${topic}`, idempotent: true, maxInFlightRequests: 1 })
    await writer.connect()
    let done = 0
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`processed ${done} of 10 in 60 s`)), 60000)
      consumer.run({
        autoCommit: false,
        eachMessage: async ({ partition, message }) => {
          const txn = await writer.transaction()
          await txn.send({ topic: `${topic}-out`, messages: [{ value: `out-${message.value}` }] })
          await txn.sendOffsets({
            consumerGroupId: groupId,
            topics: [{ topic, partitions: [{ partition, offset: (BigInt(message.offset) + 1n).toString() }] }]
          })
          await txn.commit()
          done += 1
          if (done === 10) { clearTimeout(timer); resolve() }
        }
      }).catch(reject)
    })
    await consumer.disconnect()
    await writer.disconnect()
    const admin = kafka.admin()
    await admin.connect()
    const offsets = await admin.fetchOffsets({ groupId, topics: [topic] })
    await admin.disconnect()
    return { processed: done, committed: offsets[0].partitions.map((p) => Number(p.offset)) }
  }
}

flows[flow]().then(
  (result) => { console.log(JSON.stringify(result)); process.exit(0) },
  (error) => { console.error(error); process.exit(1) }
)
