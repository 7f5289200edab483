// kafkajs steps of the compatibility suite, one JSON line per step on stdout (the same steps and
// the same record set as compat/go and compat/python/compat_util.py, as far as kafkajs has them).
// Run by compat/python/test_node_client.py:
//
//   node kafkajs_steps.js --bootstrap HOST:PORT[,HOST:PORT] [--skip STEP=REASON ...]
//
// kafkajs has no assign(): reading back uses a consumer group that commits nothing. Its admin
// client has AlterConfigs (not the incremental one), no KIP-848 consumer and no share consumer.
'use strict'

const crypto = require('crypto')
const { Kafka, logLevel, Partitioners, ConfigResourceTypes } = require('kafkajs')

const CLIENT = 'kafkajs'
const N_RECORDS = 10000
const PARTITIONS = 3
const N_KEYS = 50
const TOMBSTONE_EVERY = 1000
const STEP_TIMEOUT_MS = 90000

function parseArgs(argv) {
  const o = { bootstrap: (process.env.SLUICE_BOOTSTRAP || '').split(',').filter(Boolean), skip: {}, list: false }
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--bootstrap') o.bootstrap = argv[++i].split(',')
    else if (argv[i] === '--skip') {
      const [name, ...reason] = argv[++i].split('=')
      o.skip[name] = reason.join('=')
    } else if (argv[i] === '--list') o.list = true
    else throw new Error(`unknown argument ${argv[i]}`)
  }
  return o
}

// ---------------------------------------------------------------- records and the read-back check

function makeRecords(client, baseTs, n, from = 0) {
  const recs = []
  for (let seq = from; seq < n; seq++) {
    let value = Buffer.from(`${client}-${String(seq).padStart(5, '0')}-`)
    const tail = Buffer.alloc(seq % 97)
    for (let j = 0; j < tail.length; j++) tail[j] = (seq * 31 + j) % 256
    value = Buffer.concat([value, tail])
    if (seq % TOMBSTONE_EVERY === TOMBSTONE_EVERY - 1) value = null
    recs.push({
      seq,
      key: Buffer.from(`key-${String(seq % N_KEYS).padStart(2, '0')}`),
      value,
      headers: [['seq', Buffer.from(String(seq))], ['client', Buffer.from(client)], ['dup', Buffer.from('first')],
        ['dup', Buffer.from('second')], ['empty', Buffer.alloc(0)]],
      ts: baseTs + seq,
    })
  }
  return recs
}

// kafkajs takes headers as an object; a repeated name is an array of values, in order.
function headersObject(list) {
  const h = {}
  for (const [k, v] of list) {
    if (k in h) h[k] = [].concat(h[k], v)
    else h[k] = v
  }
  return h
}

function headersList(obj) {
  const out = []
  for (const [k, v] of Object.entries(obj || {})) {
    for (const one of Array.isArray(v) ? v : [v]) out.push([k, one])
  }
  return out
}

function got(partition, m) {
  return { partition, offset: Number(m.offset), key: m.key, value: m.value, headers: headersList(m.headers), ts: Number(m.timestamp) }
}

function seqOf(g) {
  const h = g.headers.find(([k, v]) => k === 'seq' && v !== null && v !== undefined)
  const n = h ? parseInt(h[1].toString(), 10) : NaN
  return Number.isNaN(n) ? -1 : n
}

const same = (a, b) => (a === null || a === undefined ? b === null || b === undefined : b !== null && b !== undefined && Buffer.compare(a, b) === 0)

function checkReadBack(expected, gotList, delivered) {
  const problems = new Map()
  const add = (kind, detail) => { if (!problems.has(kind)) problems.set(kind, []); problems.get(kind).push(detail) }
  if (gotList.length !== expected.length) add('count', `read ${gotList.length} records, produced ${expected.length}`)
  const parts = new Map()
  for (const g of gotList) { if (!parts.has(g.partition)) parts.set(g.partition, []); parts.get(g.partition).push(g) }
  for (const [p, rs] of parts) {
    rs.sort((a, b) => a.offset - b.offset)
    const bad = rs.findIndex((g, i) => g.offset !== i)
    if (bad >= 0) add('offsets', `partition ${p}: offsets not 0..${rs.length - 1}, at index ${bad}: ${rs[bad].offset}`)
    for (let i = 1; i < rs.length; i++) {
      const a = seqOf(rs[i - 1]); const b = seqOf(rs[i])
      if (a >= 0 && b >= 0 && b <= a) add('order', `partition ${p} offset ${rs[i].offset}: seq ${b} after seq ${a}`)
    }
  }
  if (parts.size !== PARTITIONS) add('partition', `records in partitions ${[...parts.keys()]}`)
  const seen = new Map(); const keyParts = new Map()
  for (const g of gotList) {
    const seq = seqOf(g)
    if (seq < 0 || seq >= expected.length) { add('seq header', `p${g.partition}@${g.offset}`); continue }
    if (seen.has(seq)) { add('duplicate', `seq ${seq} at p${seen.get(seq).partition}@${seen.get(seq).offset} and p${g.partition}@${g.offset}`); continue }
    seen.set(seq, g)
    const want = expected[seq]; const where = `seq ${seq} (p${g.partition}@${g.offset})`
    const k = want.key.toString()
    if (!keyParts.has(k)) keyParts.set(k, new Set())
    keyParts.get(k).add(g.partition)
    if (!same(g.key, want.key)) add('key', `${where}: ${g.key} != ${want.key}`)
    if (!same(g.value, want.value)) add('value', `${where}: ${g.value && g.value.subarray(0, 40)} != ${want.value && want.value.subarray(0, 40)}`)
    const hOk = g.headers.length === want.headers.length && g.headers.every(([k2, v], i) => k2 === want.headers[i][0] && same(v, want.headers[i][1]))
    if (!hOk) add('headers', `${where}: ${JSON.stringify(g.headers.map(([k2, v]) => [k2, v && v.toString()]))}`)
    if (g.ts !== want.ts) add('timestamp', `${where}: ${g.ts} != ${want.ts}`)
    if (delivered) {
      const d = delivered.get(seq)
      if (!d || d[0] !== g.partition || d[1] !== g.offset) add('delivery report', `${where}: producer was told ${d}`)
    }
  }
  const missing = expected.filter((r) => !seen.has(r.seq)).map((r) => r.seq)
  if (missing.length) add('missing', `${missing.length} records never read back, first seqs ${missing.slice(0, 5)}`)
  for (const [k, ps] of keyParts) if (ps.size > 1) add('key partitioning', `key ${k} in partitions ${[...ps]}`)
  if (problems.size) {
    let total = 0
    for (const v of problems.values()) total += v.length
    const lines = [`read-back check: ${total} problem(s)`]
    for (const [kind, d] of problems) lines.push(`- ${kind}: ${d.length}, e.g. ${d.slice(0, 3).join('; ')}`)
    throw new Error(lines.join('\n'))
  }
}

function offsetLookups(gotList) {
  const stamps = [...new Set(gotList.map((g) => g.ts))].sort((a, b) => a - b)
  const out = [['before every record', stamps[0] - 1000], ['first record', stamps[0]]]
  for (const pct of [25, 50, 90]) out.push([`timestamp at ${pct}%`, stamps[Math.floor(stamps.length * pct / 100)]])
  out.push(['last record', stamps[stamps.length - 1]], ['after every record', stamps[stamps.length - 1] + 1000])
  return out
}

function expectedOffsetForTime(gotList, p, ts) {
  let best = -1
  for (const g of gotList) if (g.partition === p && g.ts >= ts && (best < 0 || g.offset < best)) best = g.offset
  return best
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

async function waitUntil(timeoutMs, what, f) {
  const deadline = Date.now() + timeoutMs
  let last
  for (;;) {
    try {
      if (await f()) return
      last = undefined
    } catch (e) { last = e }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}${last ? `: ${last.message}` : ''}`)
    await sleep(200)
  }
}

// ---------------------------------------------------------------- the steps

class State {
  constructor(o) {
    this.o = o
    this.run = crypto.randomBytes(4).toString('hex')
    this.topic = `compat-kafkajs-${this.run}`
    this.kafka = new Kafka({ clientId: `compat-kafkajs-${this.run}`, brokers: o.bootstrap, logLevel: logLevel.NOTHING,
      retry: { retries: 8 } })
    this.admin = this.kafka.admin()
  }

  async createTopic() {
    await this.admin.connect()
    const created = await this.admin.createTopics({ waitForLeaders: true, topics: [{ topic: this.topic, numPartitions: PARTITIONS,
      replicationFactor: 1, configEntries: [{ name: 'retention.bytes', value: '1073741824' }] }] })
    if (created !== true) throw new Error(`createTopics answered ${created}, want true`)
    const again = await this.admin.createTopics({ topics: [{ topic: this.topic, numPartitions: PARTITIONS, replicationFactor: 1 }] })
    if (again !== false) throw new Error(`creating ${this.topic} again answered ${again}, want false (exists)`)
    await this.waitKnownEverywhere(PARTITIONS)
  }

  // Metadata through each bootstrap broker alone lists the topic (see compat/README.md, cluster mode).
  async waitKnownEverywhere(n) {
    for (const addr of this.o.bootstrap) {
      const admin = new Kafka({ clientId: `compat-kafkajs-topic-known-${this.run}`, brokers: [addr], logLevel: logLevel.NOTHING }).admin()
      await admin.connect()
      try {
        await waitUntil(30000, `${this.topic} with ${n} partitions in Metadata through ${addr}`, async () => {
          const md = await admin.fetchTopicMetadata({ topics: [this.topic] })
          return md.topics[0].partitions.length === n
        })
      } finally { await admin.disconnect() }
    }
  }

  // Sends recs idempotently with acks=all in sends of 500; returns seq -> [partition, offset].
  async produceRecords(recs) {
    const producer = this.kafka.producer({ idempotent: true, maxInFlightRequests: 1 })
    await producer.connect()
    const partitioner = Partitioners.DefaultPartitioner()
    const md = await this.admin.fetchTopicMetadata({ topics: [this.topic] })
    const partitionMetadata = md.topics[0].partitions.filter((p) => p.partitionId < PARTITIONS)
    const delivered = new Map()
    try {
      for (let i = 0; i < recs.length; i += 500) {
        const chunk = recs.slice(i, i + 500)
        const messages = chunk.map((r) => {
          const message = { key: r.key, value: r.value, headers: headersObject(r.headers), timestamp: String(r.ts) }
          // The default partitioner (Java-compatible murmur2), applied here so that each record's
          // partition, and so its offset, is known from the per-partition base offsets.
          message.partition = partitioner({ topic: this.topic, partitionMetadata, message })
          return message
        })
        const meta = await producer.send({ topic: this.topic, acks: -1, messages })
        const base = new Map(meta.map((m) => [m.partition, Number(m.baseOffset)]))
        const next = new Map()
        chunk.forEach((r, j) => {
          const p = messages[j].partition
          const k = next.get(p) || 0
          next.set(p, k + 1)
          delivered.set(r.seq, [p, base.get(p) + k])
        })
      }
    } finally { await producer.disconnect() }
    return delivered
  }

  async produce() {
    this.records = makeRecords(CLIENT, Date.now() - 3600000, N_RECORDS)
    this.delivered = await this.produceRecords(this.records)
    this.counts = new Map()
    for (const [p] of this.delivered.values()) this.counts.set(p, (this.counts.get(p) || 0) + 1)
  }

  // One group member subscribed from the beginning until `want` distinct seqs arrived; then, when
  // commit is true, commits the offset after the last record it read of each partition.
  async consumeInGroup(groupId, want, commit) {
    const consumer = this.kafka.consumer({ groupId, sessionTimeout: 30000, heartbeatInterval: 1000 })
    const gotList = []; const seen = new Set(); const next = new Map()
    await consumer.connect()
    let finish; const done = new Promise((r) => { finish = r })
    try {
      await consumer.subscribe({ topics: [this.topic], fromBeginning: true })
      await consumer.run({
        autoCommit: false,
        eachMessage: async ({ partition, message }) => {
          const g = got(partition, message)
          gotList.push(g)
          seen.add(seqOf(g))
          next.set(partition, g.offset + 1)
          if (seen.size >= want) finish()
        },
      })
      const timer = sleep(60000).then(() => { throw new Error(`group member read ${seen.size} of ${want} records in 60 s`) })
      await Promise.race([done, timer])
      if (commit) await consumer.commitOffsets([...next].map(([partition, offset]) => ({ topic: this.topic, partition, offset: String(offset) })))
    } finally { await consumer.disconnect() }
    return gotList
  }

  async readBack() {
    const gotList = await this.consumeInGroup(`compat-kafkajs-read-${this.run}`, N_RECORDS, false)
    checkReadBack(this.records, gotList, this.delivered)
    this.got = gotList
  }

  async listOffsets() {
    const offs = await this.admin.fetchTopicOffsets(this.topic)
    for (const p of offs) {
      const want = this.counts.get(p.partition) || 0
      if (Number(p.low) !== 0 || Number(p.high) !== want) throw new Error(`partition ${p.partition}: low ${p.low}, high ${p.high}; want 0 and ${want}`)
    }
    for (const [label, ts] of offsetLookups(this.got)) {
      const at = await this.admin.fetchTopicOffsetsByTimestamp(this.topic, ts)
      for (const { partition, offset } of at) {
        let want = expectedOffsetForTime(this.got, partition, ts)
        if (want < 0) want = this.counts.get(partition) // kafkajs: none at or after ts -> the high watermark
        if (Number(offset) !== want) throw new Error(`offset for time ${label} (ts ${ts}) partition ${partition}: ${offset}, want ${want}`)
      }
    }
  }

  async groupClassic() {
    this.group = `compat-kafkajs-classic-${this.run}`
    const first = await this.consumeInGroup(this.group, N_RECORDS, true)
    if (first.length !== N_RECORDS) throw new Error(`first member read ${first.length} records, want ${N_RECORDS} (duplicates?)`)
    await this.checkCommitted()
    const more = makeRecords(CLIENT, Date.now(), N_RECORDS + 30, N_RECORDS)
    const delivered = await this.produceRecords(more)
    const second = await this.consumeInGroup(this.group, 30, true)
    for (const g of second) {
      const seq = seqOf(g)
      if (seq < N_RECORDS) throw new Error(`second member read seq ${seq} at p${g.partition}@${g.offset}: a record committed by the first`)
      const d = delivered.get(seq)
      if (!d || d[0] !== g.partition || d[1] !== g.offset) throw new Error(`second member read seq ${seq} at p${g.partition}@${g.offset}, producer was told ${d}`)
    }
    if (second.length !== 30) throw new Error(`second member read ${second.length} records, want the 30 new ones`)
    for (const [p] of delivered.values()) this.counts.set(p, this.counts.get(p) + 1)
    await this.checkCommitted()
  }

  async checkCommitted() {
    const [t] = await this.admin.fetchOffsets({ groupId: this.group, topics: [this.topic] })
    for (const p of t.partitions) {
      if (p.partition >= PARTITIONS) continue
      if (Number(p.offset) !== this.counts.get(p.partition)) throw new Error(`committed offset of partition ${p.partition}: ${p.offset}, want ${this.counts.get(p.partition)}`)
    }
  }

  async describeTopics() {
    const md = await this.admin.fetchTopicMetadata({ topics: [this.topic] })
    const parts = md.topics[0].partitions
    if (parts.length < PARTITIONS) throw new Error(`${parts.length} partitions`)
    for (const p of parts) {
      if (p.partitionErrorCode !== 0 || p.leader < 0 || p.replicas.length !== 1 || p.replicas[0] !== p.leader || p.isr.length !== 1 || p.isr[0] !== p.leader) {
        throw new Error(`partition ${p.partitionId}: ${JSON.stringify(p)}`)
      }
    }
    const topics = await this.admin.listTopics()
    if (!topics.includes(this.topic)) throw new Error(`listTopics does not list ${this.topic}`)
  }

  async describe(name) {
    const r = await this.admin.describeConfigs({ includeSynonyms: false, resources: [{ type: ConfigResourceTypes.TOPIC, name: this.topic }] })
    const e = r.resources[0].configEntries.find((c) => c.configName === name)
    if (!e) throw new Error(`${name} not described`)
    return e
  }

  async configs() {
    for (const name of ['retention.ms', 'retention.bytes', 'segment.bytes', 'cleanup.policy', 'max.message.bytes']) await this.describe(name)
    const rb = await this.describe('retention.bytes')
    if (rb.configValue !== '1073741824') throw new Error(`retention.bytes given at creation described as ${rb.configValue}`)
    const rm = await this.describe('retention.ms')
    if (rm.configValue !== '604800000') throw new Error(`default retention.ms described as ${rm.configValue}`)
    // kafkajs has only AlterConfigs, which replaces the topic's whole dynamic config.
    await this.admin.alterConfigs({ validateOnly: false, resources: [{ type: ConfigResourceTypes.TOPIC, name: this.topic,
      configEntries: [{ name: 'retention.ms', value: '3600000' }, { name: 'retention.bytes', value: '1073741824' }] }] })
    await waitUntil(10000, 'retention.ms described as 3600000', async () => (await this.describe('retention.ms')).configValue === '3600000')
    let refused = null
    try {
      await this.admin.alterConfigs({ validateOnly: false, resources: [{ type: ConfigResourceTypes.TOPIC, name: this.topic,
        configEntries: [{ name: 'retention.ms', value: 'soon' }] }] })
    } catch (e) { refused = e }
    if (!refused || refused.type !== 'INVALID_CONFIG') throw new Error(`retention.ms=soon answered ${refused && refused.type}, want INVALID_CONFIG`)
  }

  async createPartitions() {
    await this.admin.createPartitions({ topicPartitions: [{ topic: this.topic, count: PARTITIONS + 1 }] })
    await this.waitKnownEverywhere(PARTITIONS + 1)
  }

  async deleteRecords() {
    await this.admin.deleteTopicRecords({ topic: this.topic, partitions: [{ partition: 0, offset: '5' }] })
    const offs = await this.admin.fetchTopicOffsets(this.topic)
    const p0 = offs.find((p) => p.partition === 0)
    if (Number(p0.low) !== 5) throw new Error(`low watermark of p0 after deleteTopicRecords: ${p0.low}, want 5`)
  }

  async describeCluster() {
    await this.admin.connect()
    const c = await this.admin.describeCluster()
    if (!c.clusterId) throw new Error('no cluster id')
    const addrs = new Set(c.brokers.map((b) => `${b.host}:${b.port}`))
    for (const a of this.o.bootstrap) if (!addrs.has(a)) throw new Error(`broker ${a} not among ${[...addrs]}`)
    if (c.brokers.length !== this.o.bootstrap.length) throw new Error(`${c.brokers.length} brokers described, bootstrap has ${this.o.bootstrap.length}`)
  }

  async listDescribeGroups() {
    const { groups } = await this.admin.listGroups()
    const g = groups.find((x) => x.groupId === this.group)
    if (!g || g.protocolType !== 'consumer') throw new Error(`listGroups: ${this.group} listed as ${JSON.stringify(g)}`)
    const { groups: [d] } = await this.admin.describeGroups([this.group])
    if (d.errorCode !== 0 || d.state !== 'Empty' || d.protocolType !== 'consumer' || d.members.length !== 0) throw new Error(`describeGroups: ${JSON.stringify(d)}`)
    await this.checkCommitted()
    await this.admin.deleteGroups([this.group])
    await waitUntil(10000, `${this.group} gone from listGroups`, async () => !(await this.admin.listGroups()).groups.some((x) => x.groupId === this.group))
  }

  async transactions() {
    const topic = `${this.topic}-txn`
    await this.admin.connect()
    await this.admin.createTopics({ waitForLeaders: true, topics: [{ topic, numPartitions: 1, replicationFactor: 1 }] })
    const producer = this.kafka.producer({ transactionalId: `compat-kafkajs-txn-${this.run}`, maxInFlightRequests: 1, idempotent: true })
    try {
      await producer.connect()
      for (const [i, commit] of [[0, true], [1, false]]) {
        const txn = await producer.transaction()
        try {
          await txn.send({ topic, acks: -1, messages: Array.from({ length: 10 }, (_, j) => ({ value: `txn${i}-${j}` })) })
        } catch (e) { await txn.abort(); throw e }
        if (commit) await txn.commit(); else await txn.abort()
      }
    } finally { await producer.disconnect() }
    const consumer = this.kafka.consumer({ groupId: `compat-kafkajs-txn-${this.run}`, readUncommitted: false })
    const values = []
    await consumer.connect()
    try {
      await consumer.subscribe({ topics: [topic], fromBeginning: true })
      await consumer.run({ eachMessage: async ({ message }) => { values.push(message.value.toString()) } })
      await waitUntil(30000, '10 committed records', async () => values.length >= 10)
      await sleep(2000) // anything of the aborted transaction would follow
    } finally { await consumer.disconnect() }
    const want = Array.from({ length: 10 }, (_, j) => `txn0-${j}`)
    if (values.join(',') !== want.join(',')) throw new Error(`read_committed consumer read ${values}, want ${want}`)
    await this.admin.deleteTopics({ topics: [topic] })
  }

  async deleteTopic() {
    await this.admin.deleteTopics({ topics: [this.topic] })
    await waitUntil(30000, `${this.topic} to leave listTopics`, async () => !(await this.admin.listTopics()).includes(this.topic))
  }
}

async function main() {
  const o = parseArgs(process.argv.slice(2))
  const s = new State(o)
  const skip = (reason) => async () => { const e = new Error(reason); e.skip = true; throw e }
  const steps = [
    ['create_topic', [], () => s.createTopic()],
    ['produce_idempotent', ['create_topic'], () => s.produce()],
    ['read_back', ['produce_idempotent'], () => s.readBack()],
    ['list_offsets', ['read_back'], () => s.listOffsets()],
    ['group_classic', ['read_back'], () => s.groupClassic()],
    ['group_consumer_protocol', [], skip('kafkajs 2.2.4 has no KIP-848 consumer (classic protocol only)')],
    ['describe_topics', ['create_topic'], () => s.describeTopics()],
    ['configs', ['create_topic'], () => s.configs()],
    ['create_partitions', ['create_topic'], () => s.createPartitions()],
    ['delete_records', ['read_back'], () => s.deleteRecords()],
    ['describe_cluster', [], () => s.describeCluster()],
    ['list_describe_groups', ['group_classic'], () => s.listDescribeGroups()],
    ['share_group', [], skip('kafkajs 2.2.4 has no share consumer (KIP-932)')],
    ['transactions', [], () => s.transactions()],
    ['delete_topic', ['create_topic'], () => s.deleteTopic()],
  ]
  if (o.list) { for (const [name] of steps) console.log(name); return }
  if (!o.bootstrap.length) { console.error('--bootstrap is required'); process.exit(2) }
  const passed = new Set(); let failed = false
  for (const [name, needs, run] of steps) {
    const start = Date.now()
    const r = { client: CLIENT, step: name }
    const missing = needs.filter((n) => !passed.has(n))
    if (o.skip[name]) Object.assign(r, { outcome: 'skipped', reason: o.skip[name] })
    else if (missing.length) Object.assign(r, { outcome: 'skipped', reason: `needs earlier step(s) that did not pass: ${missing.join(', ')}` })
    else {
      console.error(`[kafkajs] step ${name}`)
      let timer
      try {
        await Promise.race([run(), new Promise((_, rej) => { timer = setTimeout(() => rej(new Error(`step timed out after ${STEP_TIMEOUT_MS / 1000} s`)), STEP_TIMEOUT_MS) })])
        r.outcome = 'passed'
        passed.add(name)
      } catch (e) {
        if (e.skip) Object.assign(r, { outcome: 'skipped', reason: e.message })
        else {
          failed = true
          const why = [e.message]
          if (e.type) why.push(`(${e.type})`)
          if (e.originalError && e.originalError.message) why.push(`caused by: ${e.originalError.message}`)
          Object.assign(r, { outcome: 'failed', reason: why.join(' ') })
        }
      } finally { clearTimeout(timer) }
    }
    r.seconds = (Date.now() - start) / 1000
    console.error(`[kafkajs] ${name}: ${r.outcome} ${r.reason || ''}`)
    process.stdout.write(JSON.stringify(r) + '\n')
  }
  await s.admin.disconnect().catch(() => {})
  process.exit(failed ? 1 : 0)
}

main().catch((e) => { console.error(e); process.exit(2) })
