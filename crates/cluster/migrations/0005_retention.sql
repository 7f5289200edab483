-- Retention and cleanup in cluster mode (src/retention.rs): one broker at a time trims
-- partitions' log starts, deletes the index rows below them and the rows of deleted topics,
-- and deletes objects no index row refers to any more.

-- Set when the last index row of an object was deleted (by retention or a topic's purge).
-- The object is deleted from the bucket, and this row with it, once that is older than the
-- cleaner's grace period: a reader that looked up a row before it was deleted can still
-- fetch its bytes meanwhile, and a commit retried under the same key still finds its stored
-- outcomes.
ALTER TABLE objects ADD COLUMN unreferenced_at timestamptz;
CREATE INDEX objects_unreferenced ON objects (unreferenced_at) WHERE unreferenced_at IS NOT NULL;

-- Which broker runs the cleaner: a lease in one row, renewed by its holder every round and
-- taken over once it expires. Two cleaners at once would be safe (every step is idempotent
-- and takes the locks a commit takes), only wasteful.
CREATE TABLE cleaner_lease (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    broker_id integer NOT NULL,
    instance uuid NOT NULL,
    expires_at timestamptz NOT NULL
);
