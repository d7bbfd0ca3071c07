-- The table of the PostgreSQL lease backend; Migrate runs this file
-- (LEASESVC_POSTGRES_MIGRATE=true). The name is in the "C" collation so
-- that List's order is byte order; the index serves the sweeper's
-- ScanExpiry.
CREATE TABLE IF NOT EXISTS leasesvc_leases (
	name          text COLLATE "C" PRIMARY KEY,
	holder        text NOT NULL,
	fencing_token bigint NOT NULL,
	ttl_ms        bigint NOT NULL,
	acquire_time  timestamptz NOT NULL,
	renew_time    timestamptz NOT NULL,
	expire_time   timestamptz NOT NULL,
	transitions   bigint NOT NULL,
	metadata      text NOT NULL DEFAULT '',
	principal     text NOT NULL DEFAULT '',
	revoked_by    text NOT NULL DEFAULT '',
	revoke_reason text NOT NULL DEFAULT '',
	succession    text NOT NULL DEFAULT ''
);
-- revoked_by and revoke_reason are written empty and only read, for rows
-- of older versions: the revocation is now in the succession column.
-- Columns added since the table's first version, for a table created by
-- an older one: succession, the encoded value of every field of a lease
-- that is not a column of its own (lease.EncodeRow: revocation,
-- succession state of docs/contract.md §8, checkpoint, reservation,
-- deletion, session), one JSON object (text, not jsonb, so that a
-- checkpoint reads back byte for byte).
ALTER TABLE leasesvc_leases ADD COLUMN IF NOT EXISTS succession text NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS leasesvc_leases_by_expiry ON leasesvc_leases (expire_time, name);
