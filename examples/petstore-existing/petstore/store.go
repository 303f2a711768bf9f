// Package petstore serves the petstore API from PostgreSQL.
package petstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/examples/petstore-existing/api"
)

// Schema creates the store's table.
const Schema = `CREATE TABLE IF NOT EXISTS pets (
	id   bigserial PRIMARY KEY,
	name text NOT NULL,
	tag  text
)`

// ErrNotFound is returned when a pet is not found in the store.
var ErrNotFound = errors.New("not found")

// DB is what the store's functions run their statements on: a pool, a
// connection or a transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// FindPets returns the pets, optionally those with one of tags, at most
// limit of them.
func FindPets(ctx context.Context, db DB, tags *[]string, limit *int32) ([]api.Pet, error) {
	var filter []string
	if tags != nil {
		filter = *tags
	}
	var max *int32
	if limit != nil {
		max = limit
	}
	rows, err := db.Query(ctx, `SELECT id, name, tag FROM pets
		WHERE $1::text[] IS NULL OR tag = ANY($1) ORDER BY id LIMIT $2`, filter, max)
	if err != nil {
		return nil, err
	}
	pets, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (api.Pet, error) {
		var p api.Pet
		err := row.Scan(&p.Id, &p.Name, &p.Tag)
		return p, err
	})
	if pets == nil {
		pets = []api.Pet{}
	}
	return pets, err
}

// AddPet stores a new pet and returns it with its ID.
func AddPet(ctx context.Context, db DB, newPet api.NewPet) (api.Pet, error) {
	pet := api.Pet{Name: newPet.Name, Tag: newPet.Tag}
	err := db.QueryRow(ctx, `INSERT INTO pets (name, tag) VALUES ($1, $2) RETURNING id`, newPet.Name, newPet.Tag).Scan(&pet.Id)
	return pet, err
}

// FindPetByID returns a pet by its ID, or ErrNotFound.
func FindPetByID(ctx context.Context, db DB, id int64) (api.Pet, error) {
	pet := api.Pet{Id: id}
	err := db.QueryRow(ctx, `SELECT name, tag FROM pets WHERE id = $1`, id).Scan(&pet.Name, &pet.Tag)
	if errors.Is(err, pgx.ErrNoRows) {
		return api.Pet{}, fmt.Errorf("could not find pet with ID %d: %w", id, ErrNotFound)
	}
	return pet, err
}

// DeletePet deletes a pet by its ID, or returns ErrNotFound.
func DeletePet(ctx context.Context, db DB, id int64) error {
	tag, err := db.Exec(ctx, `DELETE FROM pets WHERE id = $1`, id)
	if err == nil && tag.RowsAffected() == 0 {
		err = fmt.Errorf("could not find pet with ID %d: %w", id, ErrNotFound)
	}
	return err
}
