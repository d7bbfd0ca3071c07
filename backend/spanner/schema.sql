CREATE TABLE Leases (
  Name STRING(128) NOT NULL,
  Holder STRING(256) NOT NULL,
  FencingToken INT64 NOT NULL,
  TtlMs INT64 NOT NULL,
  AcquireTime TIMESTAMP NOT NULL,
  RenewTime TIMESTAMP NOT NULL,
  ExpireTime TIMESTAMP NOT NULL,
  Transitions INT64 NOT NULL,
  Metadata STRING(MAX),
  UpdateTime TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true)
) PRIMARY KEY (Name);

CREATE INDEX LeasesByExpireTime ON Leases (ExpireTime);

ALTER TABLE Leases ADD COLUMN Principal STRING(MAX);

ALTER TABLE Leases ADD COLUMN RevokedBy STRING(MAX);

ALTER TABLE Leases ADD COLUMN RevokeReason STRING(MAX);

ALTER TABLE Leases ADD COLUMN Succession STRING(MAX)
