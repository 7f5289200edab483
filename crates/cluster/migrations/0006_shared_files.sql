-- Small files every broker of the cluster must see alike (src/shared_files.rs): the SASL users
-- (`users.json`) and the ACLs (`acls.json`). Each broker keeps a copy in its data directory
-- and reloads it when `version` moves; a change is written with compare-and-set on `version`,
-- so two brokers changing the same file at once cannot lose one of the changes.
CREATE TABLE shared_files (
    name text PRIMARY KEY,
    contents bytea NOT NULL,
    version bigint NOT NULL CHECK (version > 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);
