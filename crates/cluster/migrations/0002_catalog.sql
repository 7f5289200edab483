-- Topics, their partitions and configs, and producer ids.

CREATE TABLE topics (
    topic_id uuid PRIMARY KEY,
    name text NOT NULL,
    partitions integer NOT NULL CHECK (partitions > 0),
    -- Topic-level config overrides, name -> value (strings, as Kafka's configs).
    configs jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- Set when the topic is deleted; its name is free again at once, its rows are cleaned up
    -- later with its objects.
    deleted_at timestamptz
);
CREATE UNIQUE INDEX topics_live_name ON topics (name) WHERE deleted_at IS NULL;

-- One row per partition. next_offset is the high watermark: the commit protocol assigns
-- offsets from it under the row's lock.
CREATE TABLE partitions (
    topic_id uuid NOT NULL,
    partition integer NOT NULL CHECK (partition >= 0),
    next_offset bigint NOT NULL DEFAULT 0,
    log_start bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (topic_id, partition)
);

-- Producer ids: each nextval() is the first of a block of 1000 a broker hands out itself.
CREATE SEQUENCE producer_id_blocks START 0 MINVALUE 0 INCREMENT 1000;

-- Bumped by every catalog change, so brokers can tell their cached catalog is current.
CREATE SEQUENCE catalog_versions START 1;
