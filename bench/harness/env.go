package harness

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/testkit"
)

// Deps are the addresses of the local Kafka, MariaDB and Redis.
type Deps struct {
	Kafka    string
	MySQLDSN string // server DSN; a run gets a database of its own
	Redis    string
}

// LocalDeps reads NOTIFLOW_TEST_* (as make sets them) with localhost
// defaults.
func LocalDeps() Deps {
	get := func(k, def string) string {
		if v := os.Getenv(k); v != "" {
			return v
		}
		return def
	}
	return Deps{
		Kafka:    get("NOTIFLOW_TEST_KAFKA", "127.0.0.1:9092"),
		MySQLDSN: get("NOTIFLOW_TEST_MYSQL_DSN", "notiflow:notiflow@tcp(127.0.0.1:3306)/notiflow?parseTime=true&loc=UTC"),
		Redis:    get("NOTIFLOW_TEST_REDIS", "127.0.0.1:6379"),
	}
}

// DepsRunning reports whether scripts/deps.sh status finds all three
// dependencies up.
func DepsRunning(ctx context.Context, root string) bool {
	return exec.CommandContext(ctx, filepath.Join(root, "scripts", "deps.sh"), "status").Run() == nil
}

// DepsDown runs scripts/deps.sh down: it stops what deps.sh started.
func DepsDown(ctx context.Context, root string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "deps.sh"), "down")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("scripts/deps.sh down: %w", err)
	}
	return nil
}

// DepsUp runs scripts/deps.sh up from root, printing its output to stdout.
func DepsUp(ctx context.Context, root string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "deps.sh"), "up")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("scripts/deps.sh up: %w", err)
	}
	return nil
}

// Isolation names what one run owns: its database, topics, groups and
// Redis prefix, so runs never see each other's data.
type Isolation struct {
	Name            string
	Database        string
	TopicDue        string
	TopicDispatched string
	TopicDLQ        string
	DispatcherGroup string
	SinkGroup       string
	RedisPrefix     string
	LockKey         string
}

// NewIsolation derives the names of a run from name (letters, digits, _).
func NewIsolation(name string) Isolation {
	return Isolation{
		Name:            name,
		Database:        "nf_" + name,
		TopicDue:        name + ".notify.due.v1",
		TopicDispatched: name + ".notify.dispatched.v1",
		TopicDLQ:        name + ".notify.dlq.v1",
		DispatcherGroup: name + "-dispatcher",
		SinkGroup:       name + "-sink",
		RedisPrefix:     "nf:" + name + ":",
		LockKey:         "nf:" + name + ":scheduler:scan",
	}
}

// DSN returns the DSN of the run's database on the server of d.
func (iso Isolation) DSN(d Deps) (string, error) {
	cfg, err := mysql.ParseDSN(d.MySQLDSN)
	if err != nil {
		return "", fmt.Errorf("parse mysql dsn: %w", err)
	}
	cfg.DBName = iso.Database
	cfg.InterpolateParams = true
	return cfg.FormatDSN(), nil
}

// serverDB opens the server of d without a database; the caller closes it.
func serverDB(d Deps) (*sql.DB, error) {
	cfg, err := mysql.ParseDSN(d.MySQLDSN)
	if err != nil {
		return nil, fmt.Errorf("parse mysql dsn: %w", err)
	}
	cfg.DBName = ""
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, fmt.Errorf("open mariadb: %w", err)
	}
	return db, nil
}

// Create makes a fresh, empty database for the run and clears its Redis
// keys (an earlier run of the same name, such as the demo's, leaves
// both).
func (iso Isolation) Create(ctx context.Context, d Deps) error {
	db, err := serverDB(d)
	if err != nil {
		return err
	}
	defer db.Close()
	for _, q := range []string{"DROP DATABASE IF EXISTS `" + iso.Database + "`", "CREATE DATABASE `" + iso.Database + "`"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return iso.clearKeys(ctx, d)
}

// Remove drops the run's database and deletes its Redis keys (the
// dispatchers' done markers live for days: a hundred thousand per run
// otherwise stay behind). It returns the first failure.
func (iso Isolation) Remove(ctx context.Context, d Deps) error {
	db, err := serverDB(d)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+iso.Database+"`"); err != nil {
		return fmt.Errorf("drop database %s: %w", iso.Database, err)
	}
	return iso.clearKeys(ctx, d)
}

// clearKeys deletes the Redis keys under the run's prefix.
func (iso Isolation) clearKeys(ctx context.Context, d Deps) error {
	rdb := redis.NewClient(&redis.Options{Addr: d.Redis})
	defer rdb.Close()
	if _, err := testkit.UnlinkPrefix(ctx, rdb, iso.RedisPrefix); err != nil {
		return fmt.Errorf("delete redis keys %s*: %w", iso.RedisPrefix, err)
	}
	return nil
}

// DeleteTopics removes the run's topics.
func (iso Isolation) DeleteTopics(ctx context.Context, d Deps) error {
	client := &kafka.Client{Addr: kafka.TCP(d.Kafka), Timeout: 30 * time.Second}
	_, err := client.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: []string{iso.TopicDue, iso.TopicDispatched, iso.TopicDLQ}})
	return err
}

// Env returns the environment every service of the run shares.
func (iso Isolation) Env(d Deps, partitions int, token string) (map[string]string, error) {
	dsn, err := iso.DSN(d)
	if err != nil {
		return nil, err
	}
	return map[string]string{
		"NOTIFLOW_KAFKA_BROKERS":    d.Kafka,
		"NOTIFLOW_KAFKA_PARTITIONS": fmt.Sprint(partitions),
		"NOTIFLOW_TOPIC_DUE":        iso.TopicDue,
		"NOTIFLOW_TOPIC_DISPATCHED": iso.TopicDispatched,
		"NOTIFLOW_TOPIC_DLQ":        iso.TopicDLQ,
		"NOTIFLOW_MYSQL_DSN":        dsn,
		"NOTIFLOW_REDIS_ADDR":       d.Redis,
		"NOTIFLOW_API_TOKEN":        token,
		"NOTIFLOW_LOG_LEVEL":        "info",
	}, nil
}

// ServiceEnv returns the run-specific settings of one service.
func (iso Isolation) ServiceEnv(service string) map[string]string {
	switch service {
	case "scheduler":
		return map[string]string{
			"NOTIFLOW_LOCK_KEY":         iso.LockKey,
			"NOTIFLOW_REDIS_PREFIX":     iso.RedisPrefix,
			"NOTIFLOW_DISPATCHER_GROUP": iso.DispatcherGroup,
			"NOTIFLOW_SINK_GROUP":       iso.SinkGroup,
			"NOTIFLOW_WEBHOOK_ALLOW":    "127.0.0.1/32",
			// The start of a run answers once its targets are stored:
			// as long as Admin.StartBenchmark waits.
			"NOTIFLOW_HTTP_WRITE_TIMEOUT": startTimeout.String(),
		}
	case "dispatcher":
		return map[string]string{
			"NOTIFLOW_GROUP":         iso.DispatcherGroup,
			"NOTIFLOW_REDIS_PREFIX":  iso.RedisPrefix,
			"NOTIFLOW_WEBHOOK_ALLOW": "127.0.0.1/32",
		}
	case "sink":
		return map[string]string{"NOTIFLOW_GROUP": iso.SinkGroup}
	}
	return nil
}

// Merge returns the union of maps, later ones winning.
func Merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}
