package emulators

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	gfs "cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// firestoreWarmUp is how long a freshly started Firestore emulator is put
// under load before tests get it. The emulator is a JVM: measured here, its
// first seconds serve reads 5–10 times slower than after ten seconds of
// load, long enough to make tests with one-second TTLs flaky on a small
// machine.
const firestoreWarmUp = 4 * time.Second

// warmFirestore runs lease-like traffic (reads of present and missing
// documents, creates, conditional updates, an ordered query) against the
// emulator that FIRESTORE_EMULATOR_HOST names, for firestoreWarmUp.
func warmFirestore() error {
	ctx, cancel := context.WithTimeout(context.Background(), firestoreWarmUp)
	defer cancel()
	c, err := gfs.NewClient(context.Background(), project)
	if err != nil {
		return fmt.Errorf("emulators: warm-up client: %w", err)
	}
	defer c.Close()
	coll := c.Collection("emulators-warm-up")
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() { warmLoop(ctx, coll, w) })
	}
	wg.Wait()
	return nil
}

// warmLoop is one worker of the warm-up. Its errors are ignored: on a
// loaded machine the cold emulator itself times calls out, which is what
// the warm-up is for; the tests' own calls then report real failures.
func warmLoop(ctx context.Context, coll *gfs.CollectionRef, w int) {
	for i := 0; ctx.Err() == nil; i++ {
		ref := coll.Doc("w" + strconv.Itoa(w) + "-" + strconv.Itoa(i%8))
		ds, err := ref.Get(ctx)
		switch {
		case status.Code(err) == codes.NotFound:
			_, err = ref.Create(ctx, map[string]any{"n": i, "t": ds.ReadTime})
		case err == nil:
			_, err = ref.Update(ctx, []gfs.Update{{Path: "n", Value: i}, {Path: "t", Value: ds.ReadTime}}, gfs.LastUpdateTime(ds.UpdateTime))
		}
		if err != nil && status.Code(err) != codes.AlreadyExists && status.Code(err) != codes.FailedPrecondition {
			time.Sleep(10 * time.Millisecond) // an error: do not spin
		}
		if i%16 == 0 {
			_, _ = coll.OrderBy(gfs.DocumentID, gfs.Asc).StartAt("w").Limit(5).Documents(ctx).GetAll()
		}
	}
}
