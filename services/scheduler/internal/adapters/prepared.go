package adapters

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"time"
)

// preparedStmts holds server-side prepared statements of the claim's
// statements of a full size: the INSERT of insertChunk outbox rows and the
// DELETE of a full claim's due-queue entries. database/sql prepares each
// once per connection and keeps it while the connection lives, so MariaDB
// parses a statement of thousands of placeholders once per connection and
// then takes its values in the binary protocol, instead of parsing as many
// literals in every claim (the pool's interpolateParams). Statements of
// other sizes stay interpolated. It is safe for concurrent use.
type preparedStmts struct {
	db *sql.DB

	mu     sync.Mutex
	stmts  map[string]*sql.Stmt
	failed map[string]time.Time // query -> when its prepare last failed
}

// maxPrepared bounds the statements held: the claim has two fixed sizes
// per claim batch size, and a process claims with one batch size.
const maxPrepared = 8

// prepareRetry is how long after a failed prepare its query runs
// interpolated without trying again.
const prepareRetry = 5 * time.Second

func newPreparedStmts(db *sql.DB) *preparedStmts {
	return &preparedStmts{db: db, stmts: map[string]*sql.Stmt{}, failed: map[string]time.Time{}}
}

// prepare prepares query unless it is prepared already, its prepare failed
// less than prepareRetry ago, or maxPrepared statements are held. It takes
// a connection of the pool for the prepare, so the caller must not hold
// one (a transaction): with every connection held by claims waiting on the
// caller's locks it would wait for good. A failure is not returned: the
// query then runs interpolated, as it would without this.
func (p *preparedStmts) prepare(ctx context.Context, query string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.stmts[query]; ok || len(p.stmts) >= maxPrepared {
		return
	}
	if at, ok := p.failed[query]; ok && time.Since(at) < prepareRetry {
		return
	}
	st, err := p.db.PrepareContext(ctx, query)
	if err != nil {
		p.failed[query] = time.Now()
		return
	}
	delete(p.failed, query)
	p.stmts[query] = st
}

// exec runs query with args in tx: through its prepared statement (on
// tx's connection, prepared there on first use) when it has one, else
// interpolated.
func (p *preparedStmts) exec(ctx context.Context, tx *sql.Tx, query string, args ...any) (sql.Result, error) {
	p.mu.Lock()
	st := p.stmts[query]
	p.mu.Unlock()
	if st == nil {
		return tx.ExecContext(ctx, query, args...)
	}
	return tx.StmtContext(ctx, st).ExecContext(ctx, args...)
}

// held reports whether query has a prepared statement.
func (p *preparedStmts) held(query string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stmts[query] != nil
}

// close closes the statements held.
func (p *preparedStmts) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for q, st := range p.stmts {
		_ = st.Close()
		delete(p.stmts, q)
	}
}

// outboxInsertSQL is the claim's INSERT of rows outbox rows; an occurrence
// already in the outbox is skipped (id = id is a no-op: a duplicate keeps
// its first row).
func outboxInsertSQL(rows int) string {
	var b strings.Builder
	b.Grow(100 + rows*(2*outboxColumns+3))
	b.WriteString(`INSERT INTO outbox (target_id, occurrence_at, run_id, created_at) VALUES `)
	placeholders(&b, rows, outboxColumns)
	b.WriteString(` ON DUPLICATE KEY UPDATE id = id`)
	return b.String()
}

// dequeueSQL is the claim's DELETE of ids due-queue entries of a key range
// (arguments: the range's first and last next_run_at, then the ids).
func dequeueSQL(ids int) string {
	var b strings.Builder
	b.WriteString(`DELETE FROM target_due WHERE next_run_at BETWEEN ? AND ? AND target_id IN `)
	inList(&b, ids)
	return b.String()
}

// fullOutboxInsert is outboxInsertSQL of a full chunk, built once.
var fullOutboxInsert = sync.OnceValue(func() string { return outboxInsertSQL(insertChunk) })

// prepareClaim prepares the statements of a claim of limit entries; it
// runs before the claim's transaction begins (see prepare).
func (s *MySQLStore) prepareClaim(ctx context.Context, limit int) {
	if limit < 1 || limit+2 > maxPlaceholders {
		return
	}
	s.prepared.prepare(ctx, fullOutboxInsert())
	s.prepared.prepare(ctx, dequeueSQL(limit))
}

// maxPlaceholders is the most placeholders a prepared statement may have
// (the protocol counts them in 16 bits).
const maxPlaceholders = 65535
