-- Where every committed batch lives, and idempotent-producer state. Written by the commit
-- protocol (src/commit.rs), read by src/index.rs.

-- One row per committed object. The insert of this row is a commit's claim of its key: a
-- second commit of the same key waits on the unique index for the first, then finds the key
-- taken and answers the stored outcomes.
CREATE TABLE objects (
    object_id bigserial PRIMARY KEY,
    key text NOT NULL UNIQUE,
    broker_id integer NOT NULL,
    size_bytes bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- The commit's answer for each batch (src/commit.rs: encode_outcomes), so a commit
    -- retried after a lost answer gets the same one.
    outcomes bytea NOT NULL
);

-- Committed batches: a run of consecutive batches of one partition, contiguous in one
-- object, whose offsets run from base_offset to last_offset without a gap. A partition's rows
-- never overlap, so ordering them by last_offset orders them by offset, and "the row that
-- holds offset X" is the first row with last_offset >= X: one index range scan, which is why
-- last_offset (not base_offset) is in the key. No foreign key to objects: it would cost every
-- row inserted a lookup and a lock on the objects row; rows are only written together with it.
CREATE TABLE batches (
    topic_id uuid NOT NULL,
    partition integer NOT NULL,
    base_offset bigint NOT NULL,
    last_offset bigint NOT NULL CHECK (last_offset >= base_offset),
    object_id bigint NOT NULL,
    byte_start bigint NOT NULL,
    byte_len integer NOT NULL,
    batch_count integer NOT NULL,
    max_timestamp bigint NOT NULL,
    PRIMARY KEY (topic_id, partition, last_offset)
);
CREATE INDEX batches_object ON batches (object_id);

-- Per producer and partition: the epoch and the last batches, for duplicate and sequence
-- checks whichever broker the producer writes through. A row of (topic_id, partition) is only
-- written by a transaction that holds that partition's row lock in `partitions` (FOR UPDATE);
-- that lock is what serialises writers, so readers under it need no lock of their own.
CREATE TABLE producers (
    producer_id bigint NOT NULL,
    topic_id uuid NOT NULL,
    partition integer NOT NULL,
    epoch smallint NOT NULL,
    -- The last batches, oldest first: (first_seq, last_seq, base_offset, last_offset) each.
    recent bigint[] NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic_id, partition, producer_id)
);
