package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Lookup returns the value of an environment variable and whether it is set.
// os.LookupEnv satisfies it; tests pass a map-backed function.
type Lookup func(name string) (string, bool)

// MapLookup is a Lookup of the variables in m alone (tests).
func MapLookup(m map[string]string) Lookup {
	return func(name string) (string, bool) { v, ok := m[name]; return v, ok }
}

// Load fills the tagged fields of cfg (a pointer to a struct) from the
// process environment. See LoadFrom.
func Load(cfg any) error { return LoadFrom(os.LookupEnv, cfg) }

// LoadFrom fills the tagged fields of cfg from lookup (the process
// environment when lookup is nil). A field tagged
// `env:"NAME"` takes the variable NAME when it is set and non-empty, else the
// field's `default` tag, else keeps its current value. Nested structs
// without an env tag are walked. Supported kinds: string, bool, signed and
// unsigned integers, float64, time.Duration and []string (comma separated).
// Every bad value is reported, each naming its variable.
func LoadFrom(lookup Lookup, cfg any) error {
	v := reflect.ValueOf(cfg)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("config: Load needs a pointer to a struct, got %T", cfg)
	}
	if lookup == nil {
		lookup = os.LookupEnv
	}
	var errs []error
	walk(v.Elem(), func(f reflect.Value, sf reflect.StructField, name string) {
		raw, ok := lookup(name)
		if !ok || raw == "" {
			def, hasDef := sf.Tag.Lookup("default")
			if !hasDef {
				return
			}
			raw = def
		}
		if err := set(f, raw); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", name, raw, err))
		}
	})
	return errors.Join(errs...)
}

// FillZero sets each tagged field of cfg (a pointer to a struct) that holds
// its zero value to its `default` tag, ignoring the environment: the
// zero-value defaults of a library struct whose tags state its defaults,
// for callers that build one by hand. A field without a default tag stays
// zero. A bad default tag is reported as LoadFrom reports a bad value.
func FillZero(cfg any) error {
	v := reflect.ValueOf(cfg)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("config: FillZero needs a pointer to a struct, got %T", cfg)
	}
	var errs []error
	walk(v.Elem(), func(f reflect.Value, sf reflect.StructField, name string) {
		def, ok := sf.Tag.Lookup("default")
		if !ok || !f.IsZero() {
			return
		}
		if err := set(f, def); err != nil {
			errs = append(errs, fmt.Errorf("%s default %q: %w", name, def, err))
		}
	})
	return errors.Join(errs...)
}

// LoadAs returns a T (a struct type) filled by LoadFrom(lookup, &t).
func LoadAs[T any](lookup Lookup) (T, error) {
	var c T
	err := LoadFrom(lookup, &c)
	return c, err
}

// Vars returns the names of the variables cfg's type reads, in field order.
func Vars(cfg any) []string {
	v := reflect.ValueOf(cfg)
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	var names []string
	walk(v, func(_ reflect.Value, _ reflect.StructField, name string) { names = append(names, name) })
	return names
}

// Errorf builds a validation error for the variable name, for use in a
// config struct's Validate method.
func Errorf(name, format string, args ...any) error {
	return fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...))
}

func walk(v reflect.Value, fn func(reflect.Value, reflect.StructField, string)) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		name, ok := sf.Tag.Lookup("env")
		switch {
		case ok && name != "" && name != "-":
			fn(v.Field(i), sf, name)
		case !ok && sf.Type.Kind() == reflect.Struct && sf.Type != reflect.TypeOf(time.Time{}):
			walk(v.Field(i), fn)
		}
	}
}

var durationType = reflect.TypeOf(time.Duration(0))

func set(f reflect.Value, raw string) error {
	if f.Type() == durationType {
		d, err := time.ParseDuration(raw)
		if err != nil {
			return fmt.Errorf("not a duration (e.g. 250ms, 10s): %w", err)
		}
		f.SetInt(int64(d))
		return nil
	}
	switch f.Kind() {
	case reflect.String:
		f.SetString(raw)
	case reflect.Bool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return errors.New("not a boolean (true or false)")
		}
		f.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(raw, 10, f.Type().Bits())
		if err != nil {
			return errors.New("not an integer")
		}
		f.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := strconv.ParseUint(raw, 10, f.Type().Bits())
		if err != nil {
			return errors.New("not a non-negative integer")
		}
		f.SetUint(n)
	case reflect.Float64, reflect.Float32:
		x, err := strconv.ParseFloat(raw, f.Type().Bits())
		if err != nil {
			return errors.New("not a number")
		}
		f.SetFloat(x)
	case reflect.Slice:
		if f.Type().Elem().Kind() != reflect.String {
			return fmt.Errorf("unsupported field type %s", f.Type())
		}
		var items []string
		for _, s := range strings.Split(raw, ",") {
			if s = strings.TrimSpace(s); s != "" {
				items = append(items, s)
			}
		}
		f.Set(reflect.ValueOf(items))
	default:
		return fmt.Errorf("unsupported field type %s", f.Type())
	}
	return nil
}
