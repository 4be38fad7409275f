package config

import (
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Redacted replaces a secret in Print's output and in log lines.
const Redacted = "redacted"

// Print writes the effective value of every variable cfg's type reads
// (see Vars for the order), one `NAME=value` line each, the value as the
// variable would be set: durations as 1m30s, lists comma separated.
// Fields tagged `secret:"true"` print Redacted when set (empty when not),
// fields tagged `secret:"dsn"` print RedactDSN of their value. cfg is a
// struct or a pointer to one, typically after Load.
func Print(w io.Writer, cfg any) error {
	v := reflect.ValueOf(cfg)
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return fmt.Errorf("config: Print needs a struct, got %T", cfg)
	}
	var b strings.Builder
	walk(v, func(f reflect.Value, sf reflect.StructField, name string) {
		fmt.Fprintf(&b, "%s=%s\n", name, redact(sf.Tag.Get("secret"), format(f)))
	})
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("print config: %w", err)
	}
	return nil
}

// LogValue is what a log line shows of cfg: every variable cfg's type
// reads, as Print writes it (secrets redacted the same way), one attribute
// per variable named after it. A config type's LogValue method returns it,
// so the log and -print-config never disagree.
func LogValue(cfg any) slog.Value {
	v := reflect.ValueOf(cfg)
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return slog.StringValue(fmt.Sprintf("config: LogValue needs a struct, got %T", cfg))
	}
	var attrs []slog.Attr
	walk(v, func(f reflect.Value, sf reflect.StructField, name string) {
		attrs = append(attrs, slog.String(name, redact(sf.Tag.Get("secret"), format(f))))
	})
	return slog.GroupValue(attrs...)
}

// PrintConfigUsage is the help text of each service's -print-config flag.
const PrintConfigUsage = "print the effective configuration (every NOTIFLOW_* variable read, after environment and defaults, secrets redacted) as NAME=value lines and exit; exit status 2 if it is invalid"

// RedactDSN returns a MySQL DSN with its password replaced by Redacted,
// "" when it is empty, or "invalid" when it does not parse (a DSN that
// does not parse may hold a password anywhere).
func RedactDSN(dsn string) string {
	if dsn == "" {
		return ""
	}
	d, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "invalid"
	}
	if d.Passwd != "" {
		d.Passwd = Redacted
	}
	return d.FormatDSN()
}

func redact(kind, value string) string {
	switch {
	case kind == "dsn":
		return RedactDSN(value)
	case kind != "" && kind != "false" && value != "":
		return Redacted
	}
	return value
}

// format is the inverse of set: the text that set parses back to f.
func format(f reflect.Value) string {
	switch x := f.Interface().(type) {
	case time.Duration:
		return x.String()
	case []string:
		return strings.Join(x, ",")
	}
	return fmt.Sprint(f.Interface())
}
