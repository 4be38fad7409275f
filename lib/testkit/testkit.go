package testkit

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/notiflow/notiflow/lib/kafkax"
)

// Default addresses of the services `make deps` starts.
const (
	DefaultKafka = "127.0.0.1:9092"
	DefaultMySQL = "notiflow:notiflow@tcp(127.0.0.1:3306)/notiflow?parseTime=true&loc=UTC"
	DefaultRedis = "127.0.0.1:6379"
)

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// ID returns a short random name with the given prefix, safe for topics,
// groups, database names and Redis keys.
func ID(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}

func reachable(tb testing.TB, what, addr string) {
	tb.Helper()
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		tb.Fatalf("%s is not reachable at %s (%v): start it with `make deps`", what, addr, err)
	}
	_ = c.Close()
}

// KafkaBrokers returns the test broker addresses after checking that the
// first one accepts connections.
func KafkaBrokers(tb testing.TB) []string {
	tb.Helper()
	brokers := strings.Split(env("NOTIFLOW_TEST_KAFKA", DefaultKafka), ",")
	reachable(tb, "Kafka", brokers[0])
	return brokers
}

// Topic creates a topic with a unique name and the given partition count and
// deletes it when the test ends.
func Topic(tb testing.TB, brokers []string, partitions int) string {
	tb.Helper()
	name := ID("t_" + sanitize(tb.Name()))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := kafkax.EnsureTopics(ctx, brokers, kafka.TopicConfig{Topic: name, NumPartitions: partitions, ReplicationFactor: 1}); err != nil {
		tb.Fatalf("create topic %s: %v", name, err)
	}
	tb.Cleanup(func() {
		client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
		_, _ = client.DeleteTopics(context.Background(), &kafka.DeleteTopicsRequest{Topics: []string{name}})
	})
	return name
}

// Group returns a unique consumer group id for the test.
func Group(tb testing.TB) string { return ID("g_" + sanitize(tb.Name())) }

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if b.Len() >= 24 {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// MySQLDSN creates a database of its own for the test on the test server and
// returns a DSN (go-sql-driver format, parseTime and UTC) that points at it.
// The database is dropped when the test ends.
func MySQLDSN(tb testing.TB) string {
	tb.Helper()
	base := env("NOTIFLOW_TEST_MYSQL_DSN", DefaultMySQL)
	cfg, err := mysql.ParseDSN(base)
	if err != nil {
		tb.Fatalf("parse NOTIFLOW_TEST_MYSQL_DSN: %v", err)
	}
	reachable(tb, "MariaDB", cfg.Addr)
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		tb.Fatalf("open mysql: %v", err)
	}
	defer db.Close()
	name := ID("t_" + sanitize(tb.Name()))
	if _, err := db.Exec("CREATE DATABASE `" + name + "`"); err != nil {
		tb.Fatalf("create database %s: %v", name, err)
	}
	tb.Cleanup(func() {
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			return
		}
		defer db.Close()
		_, _ = db.Exec("DROP DATABASE IF EXISTS `" + name + "`")
	})
	cfg.DBName = name
	return cfg.FormatDSN()
}

// RedisAddr returns the test Redis address after checking it is reachable.
func RedisAddr(tb testing.TB) string {
	tb.Helper()
	addr := env("NOTIFLOW_TEST_REDIS", DefaultRedis)
	reachable(tb, "Redis", addr)
	return addr
}

// Redis returns a client for the test Redis and a key prefix of the test's
// own; keys under the prefix are deleted when the test ends.
func Redis(tb testing.TB) (*redis.Client, string) {
	tb.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: RedisAddr(tb)})
	prefix := ID("t_"+sanitize(tb.Name())) + ":"
	tb.Cleanup(func() {
		if _, err := UnlinkPrefix(context.Background(), rdb, prefix); err != nil {
			tb.Logf("remove the test's redis keys: %v", err)
		}
		_ = rdb.Close()
	})
	return rdb, prefix
}

// UnlinkPrefix removes every key that starts with prefix (taken
// literally: glob characters in it are escaped for SCAN), one UNLINK per
// page of the scan, and returns how many it removed.
func UnlinkPrefix(ctx context.Context, rdb redis.Cmdable, prefix string) (int, error) {
	pattern := globEscaper.Replace(prefix) + "*"
	removed := 0
	for cursor := uint64(0); ; {
		keys, next, err := rdb.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return removed, fmt.Errorf("scan the keys under %s: %w", prefix, err)
		}
		if len(keys) > 0 {
			n, err := rdb.Unlink(ctx, keys...).Result()
			removed += int(n)
			if err != nil {
				return removed, fmt.Errorf("remove the keys under %s: %w", prefix, err)
			}
		}
		if cursor = next; cursor == 0 {
			return removed, nil
		}
	}
}

// globEscaper escapes the characters a Redis glob pattern gives a meaning.
var globEscaper = strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)

// Eventually polls cond every 20ms until it returns nil or timeout passes,
// then fails the test with the last error.
func Eventually(tb testing.TB, timeout time.Duration, cond func() error) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("condition not met within %s: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Errorf is fmt.Errorf, for Eventually conditions.
func Errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
