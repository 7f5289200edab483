-- Consumer groups: who coordinates each, their state and committed offsets
-- (crates/cluster/src/groups.rs).

-- The coordinator lease of a group. The broker (broker_id, instance) is the group's
-- coordinator while expires_at > now() and its row in `brokers` is live. epoch is 1 for the
-- first holder and goes up by one at every takeover; every write of the holder names the
-- epoch and instance it acquired the lease with, under this row's lock, so a write after a
-- takeover changes nothing. Rows stay when a lease ends (release sets expires_at = now()),
-- so the epoch keeps counting.
CREATE TABLE group_coordinators (
    group_id text PRIMARY KEY,
    broker_id integer NOT NULL,
    instance uuid NOT NULL,
    epoch bigint NOT NULL CHECK (epoch >= 1),
    expires_at timestamptz NOT NULL
);
-- renew_all and release_all: every lease of one broker process.
CREATE INDEX group_coordinators_instance ON group_coordinators (instance);

-- A group's state snapshot (the group state machine's JSON). `json`, not `jsonb`: it holds
-- client strings (member and client ids), which may contain U+0000, which jsonb cannot hold.
CREATE TABLE group_snapshots (
    group_id text PRIMARY KEY,
    snapshot json NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Committed offsets: `committed` holds the offset's fields, {"offset", "leader_epoch",
-- "metadata", "commit_timestamp_ms"} (json for the same reason: metadata is a client string).
CREATE TABLE group_offsets (
    group_id text NOT NULL,
    topic text NOT NULL,
    partition integer NOT NULL,
    committed json NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, topic, partition)
);
