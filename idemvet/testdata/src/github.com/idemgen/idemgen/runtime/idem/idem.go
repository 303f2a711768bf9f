// Package idem is a stub of idemgen's runtime with what scaffolds use.
package idem

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

var ErrNotImplemented = errors.New("phase not implemented")

// Beginner, Local and Foreign are the steps of a handler.
type Beginner interface{}

func Local[T any](ctx context.Context, db Beginner, name string, fn func(ctx context.Context, tx pgx.Tx) (T, error)) (T, error) {
	var v T
	return v, nil
}

func Foreign[T any](ctx context.Context, name string, fn func(ctx context.Context, key string) (T, error)) (T, error) {
	var v T
	return v, nil
}
