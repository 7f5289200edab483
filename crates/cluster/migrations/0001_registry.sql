-- The cluster's identity and its live brokers (crates/cluster/src/registry.rs).

-- One row: which cluster this database holds, and the bucket it belongs to. A broker started
-- with another --storage than the one recorded here is refused (two clusters must never share
-- one database's offsets). The first broker inserts it (ON CONFLICT DO NOTHING, so brokers
-- starting together agree on one); every later one reads it.
CREATE TABLE cluster (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    -- 16 random bytes as 22 characters of URL-safe base64 without padding, as Kafka's.
    cluster_id text NOT NULL CHECK (length(cluster_id) = 22),
    -- The --storage URL, without any password.
    storage_url text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- One row per broker process. A broker takes a new id at every start (ids are never
-- reused), renews expires_at with its heartbeat, and is live while expires_at > now() and
-- stopped_at IS NULL. Every time is the database's clock (now()), never a broker's.
-- `instance` is random per process start: every write a broker makes on the cluster's behalf
-- (commits, group writes) checks that its row still carries it and is live, which fences a
-- broker that was declared dead and came back, or whose row was taken over.
-- A clean shutdown sets stopped_at (and ends the lease); rows whose lease ended more than an
-- hour ago are deleted by any broker's heartbeat.
CREATE SEQUENCE broker_ids START 1;
CREATE TABLE brokers (
    broker_id integer PRIMARY KEY DEFAULT nextval('broker_ids'),
    instance uuid NOT NULL UNIQUE,
    host text NOT NULL CHECK (host <> ''),
    port integer NOT NULL CHECK (port BETWEEN 1 AND 65535),
    rack text,
    -- Where the process runs ("host H pid P"), for operators reading this table.
    process text NOT NULL DEFAULT '',
    started_at timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    stopped_at timestamptz
);
ALTER SEQUENCE broker_ids OWNED BY brokers.broker_id;
CREATE INDEX brokers_expires_at ON brokers (expires_at);
