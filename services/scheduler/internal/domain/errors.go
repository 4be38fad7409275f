package domain

import "errors"

// Errors the API maps to HTTP statuses.
var (
	// ErrNotFound: no such target (or it was deleted).
	ErrNotFound = errors.New("target not found")
	// ErrConflict: the target's status does not allow the change.
	ErrConflict = errors.New("conflict with the target's status")
)
