package main

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"
	database "cloud.google.com/go/spanner/admin/database/apiv1"
	"cloud.google.com/go/spanner/admin/database/apiv1/databasepb"
	"google.golang.org/grpc/codes"
)

// minimalTable is the table of the minimal transaction, which leasebench
// creates in the service's Spanner database when it is missing: a key, an
// expire time indexed as the lease table's is, and a commit timestamp.
const minimalTable = "LeasebenchMinimal"

var minimalDDL = []string{
	"CREATE TABLE " + minimalTable + ` (Name STRING(128) NOT NULL, ExpireTime TIMESTAMP NOT NULL,
	  UpdateTime TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true)) PRIMARY KEY (Name)`,
	"CREATE INDEX " + minimalTable + "ByExpireTime ON " + minimalTable + " (ExpireTime)",
}

// minimaler is a direct path with a minimal transaction: the least a
// renew can cost on the backend, without the store's own read and
// mutation, so that the store's per-operation cost shows beside it.
type minimaler interface {
	// minimal runs the minimal transaction on name.
	minimal(ctx context.Context, name string) error
}

// minimal runs one read-write transaction with SELECT CURRENT_TIMESTAMP(),
// a ReadRow of name and an InsertOrUpdate with a commit timestamp into
// minimalTable.
func (d *spannerDirect) minimal(ctx context.Context, name string) error {
	if err := d.ensureMinimal(ctx); err != nil {
		return err
	}
	_, err := d.c.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		var now time.Time
		if err := tx.Query(ctx, spanner.Statement{SQL: "SELECT CURRENT_TIMESTAMP()"}).Do(func(r *spanner.Row) error { return r.Columns(&now) }); err != nil {
			return err
		}
		if _, err := tx.ReadRow(ctx, minimalTable, spanner.Key{name}, []string{"ExpireTime"}); err != nil && spanner.ErrCode(err) != codes.NotFound {
			return err
		}
		return tx.BufferWrite([]*spanner.Mutation{spanner.InsertOrUpdate(minimalTable, []string{"Name", "ExpireTime", "UpdateTime"},
			[]any{name, now.Add(30 * time.Second), spanner.CommitTimestamp})})
	})
	if err != nil {
		return fmt.Errorf("minimal transaction %s: %w", name, err)
	}
	return nil
}

// ensureMinimal creates minimalTable once, when missing.
func (d *spannerDirect) ensureMinimal(ctx context.Context) error {
	d.once.Do(func() {
		var n int64
		it := d.c.Single().Query(ctx, spanner.Statement{
			SQL:    "SELECT COUNT(*) FROM INFORMATION_SCHEMA.TABLES WHERE TABLE_SCHEMA = '' AND TABLE_NAME = @t",
			Params: map[string]any{"t": minimalTable},
		})
		if d.minimalErr = it.Do(func(r *spanner.Row) error { return r.Columns(&n) }); d.minimalErr != nil || n > 0 {
			return
		}
		admin, err := database.NewDatabaseAdminClient(ctx)
		if err != nil {
			d.minimalErr = err
			return
		}
		defer func() { _ = admin.Close() }()
		op, err := admin.UpdateDatabaseDdl(ctx, &databasepb.UpdateDatabaseDdlRequest{Database: d.db, Statements: minimalDDL})
		if err == nil {
			err = op.Wait(ctx)
		}
		d.minimalErr = err
	})
	if d.minimalErr != nil {
		return fmt.Errorf("minimal transaction: table %s in %s: %w", minimalTable, d.db, d.minimalErr)
	}
	return nil
}
