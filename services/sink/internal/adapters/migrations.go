package adapters

import (
	"context"

	"github.com/notiflow/notiflow/services/sink/notifications"
)

// Migrate brings the schema to the latest version (the migrations of
// package notifications, which owns the table's definition; running it
// again is a no-op).
func (s *Store) Migrate(ctx context.Context) error {
	return notifications.Migrate(ctx, s.db)
}

// SchemaVersion returns the highest applied migration version (0 if none).
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	return notifications.SchemaVersion(ctx, s.db)
}
