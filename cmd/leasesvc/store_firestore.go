package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	gfs "cloud.google.com/go/firestore"

	"github.com/leasesvc/leasesvc/backend"
	firestorestore "github.com/leasesvc/leasesvc/backend/firestore"
)

// firestoreDatabaseRE matches a Firestore database ID: "(default)" or 4–63
// characters of [a-z0-9-], starting with a letter and not ending with "-".
var firestoreDatabaseRE = regexp.MustCompile(`^(\(default\)|[a-z][a-z0-9-]{2,61}[a-z0-9])$`)

// openFirestore opens the Firestore backend configured by the environment
// (LEASESVC_PROJECT or GOOGLE_CLOUD_PROJECT, LEASESVC_FIRESTORE_DATABASE,
// LEASESVC_FIRESTORE_COLLECTION; FIRESTORE_EMULATOR_HOST is honoured). The
// returned close function releases the client.
//
//   - LEASESVC_PROJECT: the Google Cloud project; GOOGLE_CLOUD_PROJECT when
//     unset; one of them is required.
//   - LEASESVC_FIRESTORE_DATABASE: the database ID; default "(default)".
//   - LEASESVC_FIRESTORE_COLLECTION: the collection of lease documents;
//     default "leases".
//
// Credentials are the Application Default Credentials; with
// FIRESTORE_EMULATOR_HOST set, the client talks to that emulator without
// any. Nothing is read from Firestore here: /readyz reports whether it
// answers.
func openFirestore(ctx context.Context, getenv func(string) string) (backend.Store, func() error, error) {
	project := getenv("LEASESVC_PROJECT")
	if project == "" {
		project = getenv("GOOGLE_CLOUD_PROJECT")
	}
	if project == "" {
		return nil, nil, errors.New("LEASESVC_BACKEND=firestore needs a project: set LEASESVC_PROJECT (or GOOGLE_CLOUD_PROJECT)")
	}
	database := getenv("LEASESVC_FIRESTORE_DATABASE")
	if database == "" {
		database = gfs.DefaultDatabaseID
	}
	if !firestoreDatabaseRE.MatchString(database) {
		return nil, nil, fmt.Errorf("LEASESVC_FIRESTORE_DATABASE=%q: want (default) or 4–63 characters of [a-z0-9-] starting with a letter", database)
	}
	collection := getenv("LEASESVC_FIRESTORE_COLLECTION")
	if collection == "" {
		collection = firestorestore.DefaultCollection
	}
	client, err := gfs.NewClientWithDatabase(ctx, project, database)
	if err != nil {
		return nil, nil, fmt.Errorf("firestore client for project %q database %q: %w", project, database, err)
	}
	store, err := firestorestore.New(client, firestorestore.WithCollection(collection))
	if err != nil {
		if cerr := client.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close firestore client: %w", cerr))
		}
		return nil, nil, fmt.Errorf("LEASESVC_FIRESTORE_COLLECTION=%q: %w", collection, err)
	}
	closeClient := func() error {
		if err := client.Close(); err != nil {
			return fmt.Errorf("close firestore client: %w", err)
		}
		return nil
	}
	return store, closeClient, nil
}
