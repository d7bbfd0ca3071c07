package firestore

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	gfs "cloud.google.com/go/firestore"

	"github.com/leasesvc/leasesvc/backend"
)

func init() {
	backend.Register(backend.Opener{
		Name:    "firestore",
		Summary: "Cloud Firestore: one document per lease; Firestore's read time decides",
		Settings: []backend.Setting{
			{Env: "LEASESVC_FIRESTORE_DATABASE", Default: "`(default)`", Usage: "Firestore database ID"},
			{Env: "LEASESVC_FIRESTORE_COLLECTION", Default: "`leases`", Usage: "Firestore collection of lease documents"},
		},
		Open: open,
	})
}

// databaseRE matches a Firestore database ID: "(default)" or 4–63
// characters of [a-z0-9-], starting with a letter and not ending with "-".
var databaseRE = regexp.MustCompile(`^(\(default\)|[a-z][a-z0-9-]{2,61}[a-z0-9])$`)

// open opens the Firestore backend configured by the environment
// (LEASESVC_PROJECT, a setting of the service's, names the project;
// FIRESTORE_EMULATOR_HOST is honoured). Credentials are the Application
// Default Credentials. Nothing is read from Firestore here: /readyz
// reports whether it answers.
func open(ctx context.Context, getenv func(string) string, _ backend.OpenOptions) (backend.Opened, error) {
	project := getenv("LEASESVC_PROJECT")
	if project == "" {
		project = getenv("GOOGLE_CLOUD_PROJECT")
	}
	if project == "" {
		return backend.Opened{}, errors.New("LEASESVC_BACKEND=firestore needs a project: set LEASESVC_PROJECT (or GOOGLE_CLOUD_PROJECT)")
	}
	database := getenv("LEASESVC_FIRESTORE_DATABASE")
	if database == "" {
		database = gfs.DefaultDatabaseID
	}
	if !databaseRE.MatchString(database) {
		return backend.Opened{}, fmt.Errorf("LEASESVC_FIRESTORE_DATABASE=%q: want (default) or 4–63 characters of [a-z0-9-] starting with a letter", database)
	}
	collection := getenv("LEASESVC_FIRESTORE_COLLECTION")
	if collection == "" {
		collection = DefaultCollection
	}
	if err := validCollection(collection); err != nil {
		return backend.Opened{}, fmt.Errorf("LEASESVC_FIRESTORE_COLLECTION=%q: %w", collection, err)
	}
	client, err := gfs.NewClientWithDatabase(ctx, project, database)
	if err != nil {
		return backend.Opened{}, fmt.Errorf("firestore client for project %q database %q: %w", project, database, err)
	}
	store, err := New(client, WithCollection(collection))
	if err != nil {
		return backend.Opened{}, errors.Join(err, client.Close())
	}
	closeClient := func() error {
		if err := client.Close(); err != nil {
			return fmt.Errorf("close firestore client: %w", err)
		}
		return nil
	}
	return backend.Opened{Store: store, Close: closeClient}, nil
}
