-- Where every committed batch lives, and idempotent-producer state.

-- One row per committed object.
CREATE TABLE objects (
    object_id bigserial PRIMARY KEY,
    key text NOT NULL UNIQUE,
    broker_id integer NOT NULL,
    size_bytes bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- The commit's answer for each batch, so a commit retried after a lost answer gets the
    -- same one.
    outcomes bytea NOT NULL
);

-- Committed batches: a run of consecutive batches of one partition, contiguous in one
-- object, whose offsets run from base_offset to last_offset without a gap.
CREATE TABLE batches (
    topic_id uuid NOT NULL,
    partition integer NOT NULL,
    base_offset bigint NOT NULL,
    last_offset bigint NOT NULL,
    object_id bigint NOT NULL,
    byte_start bigint NOT NULL,
    byte_len integer NOT NULL,
    batch_count integer NOT NULL,
    max_timestamp bigint NOT NULL,
    PRIMARY KEY (topic_id, partition, base_offset)
);
CREATE INDEX batches_object ON batches (object_id);

-- Per producer and partition: the epoch and the last batches, for duplicate and sequence
-- checks whichever broker the producer writes through.
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
