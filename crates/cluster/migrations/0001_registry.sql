-- The cluster's identity and its live brokers.

-- One row: which cluster this database holds, and the bucket it belongs to. A broker started
-- with another --storage than the one recorded here is refused (two clusters must never share
-- one database's offsets).
CREATE TABLE cluster (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    cluster_id text NOT NULL,
    storage_url text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- One row per broker process. A broker takes a new id at every start (ids are never
-- reused), renews expires_at with its heartbeat, and is live while expires_at > now().
-- `instance` is random per process start: every write a broker makes on the cluster's behalf
-- (commits, group writes) checks that its row still carries it, which fences a broker that
-- was declared dead and came back.
CREATE SEQUENCE broker_ids START 1;
CREATE TABLE brokers (
    broker_id integer PRIMARY KEY,
    instance uuid NOT NULL UNIQUE,
    host text NOT NULL,
    port integer NOT NULL,
    rack text,
    process text NOT NULL DEFAULT '',
    started_at timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    stopped_at timestamptz
);
CREATE INDEX brokers_expires_at ON brokers (expires_at);
