-- Topics, their partitions and configs, producer ids, and the catalog's version.

CREATE TABLE topics (
    topic_id uuid PRIMARY KEY,
    name text NOT NULL,
    partitions integer NOT NULL CHECK (partitions > 0),
    -- Topic-level config overrides, name -> value (strings, as Kafka's configs).
    configs jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(configs) = 'object'),
    created_at timestamptz NOT NULL DEFAULT now(),
    -- Set when the topic is deleted; its name is free again at once, its rows are cleaned up
    -- later with its objects.
    deleted_at timestamptz
);
-- At most one live topic per name: of two brokers creating one name at once, the second
-- insert fails on this index and that broker answers TOPIC_ALREADY_EXISTS.
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

-- The catalog's version: every change to topics, partitions counts or configs takes the next
-- value of catalog_versions and stores it in catalog_version's one row, in the same
-- transaction. Brokers poll that row and reload their copy when it moved.
--
-- Why a row and not the sequence's last_value alone: nextval() is seen by everyone at once,
-- before its transaction commits. A broker could read version N, reload the topics before N's
-- change is committed, and then believe it holds N forever. The row is transactional, and
-- every change holds its lock from the start of its transaction to its commit, so versions
-- commit in the order they were taken and a snapshot that shows version N shows every change
-- up to N.
CREATE SEQUENCE catalog_versions START 1;
CREATE TABLE catalog_version (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    version bigint NOT NULL
);
INSERT INTO catalog_version (version) VALUES (0);
