-- Consumer groups: who coordinates each, their state and committed offsets.

-- The coordinator lease of a group: the broker that holds it while expires_at > now() is the
-- group's coordinator. epoch goes up at every takeover; the holder's writes check it.
CREATE TABLE group_coordinators (
    group_id text PRIMARY KEY,
    broker_id integer NOT NULL,
    instance uuid NOT NULL,
    epoch bigint NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX group_coordinators_instance ON group_coordinators (instance);

-- A group's state snapshot (the group state machine's JSON).
CREATE TABLE group_snapshots (
    group_id text PRIMARY KEY,
    snapshot jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Committed offsets.
CREATE TABLE group_offsets (
    group_id text NOT NULL,
    topic text NOT NULL,
    partition integer NOT NULL,
    committed jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, topic, partition)
);
