package cli

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"
)

// This file owns how a daemon's settings become flags. Each flag is bound
// to its field of the package's Config (Destination), so a setting is
// declared once: its flag, its environment variable (the flag's name,
// upper case, after the command's prefix), its default (the field's value
// in the package's DefaultConfig) and its field, which no string names.
// A Config's check names the field of what it refuses (a ConfigField
// method); flagErrors tells it as the flag, found by the field's address.
//
// Convention for the bounds that may bound nothing (intake's
// --max-conns-per-addr, --max-live-per-addr, --max-live-per-principal):
// -1 is no bound, as in the Config; 0 is the default, as in every field.

// settings binds flags to the fields of one Config, under the environment
// prefix env ("TALLY_INTAKE_").
type settings struct{ env string }

func (s settings) envVars(name string) []string {
	return []string{s.env + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))}
}

func (s settings) duration(name string, dst *time.Duration, usage string) *ucli.DurationFlag {
	return &ucli.DurationFlag{Name: name, EnvVars: s.envVars(name), Value: *dst, Destination: dst, Usage: usage}
}

func (s settings) int(name string, dst *int, usage string) *ucli.IntFlag {
	return &ucli.IntFlag{Name: name, EnvVars: s.envVars(name), Value: *dst, Destination: dst, Usage: usage}
}

func (s settings) int64(name string, dst *int64, usage string) *ucli.Int64Flag {
	return &ucli.Int64Flag{Name: name, EnvVars: s.envVars(name), Value: *dst, Destination: dst, Usage: usage}
}

func (s settings) float64(name string, dst *float64, usage string) *ucli.Float64Flag {
	return &ucli.Float64Flag{Name: name, EnvVars: s.envVars(name), Value: *dst, Destination: dst, Usage: usage}
}

func (s settings) string(name string, dst *string, usage string) *ucli.StringFlag {
	return &ucli.StringFlag{Name: name, EnvVars: s.envVars(name), Value: *dst, Destination: dst, Usage: usage}
}

func (s settings) bool(name string, dst *bool, usage string) *ucli.BoolFlag {
	return &ucli.BoolFlag{Name: name, EnvVars: s.envVars(name), Value: *dst, Destination: dst, Usage: usage}
}

// checkSettings refuses, before anything connects, a flag of fields set
// to zero where the default of its field is not zero (the Config would
// take that zero for the default: the flag is left out for that), then
// runs validate (the Config's Validate) and tells its errors as the
// flags'. cfg points to the Config the flags are bound to, def is its
// DefaultConfig.
func checkSettings[C any](c *ucli.Context, cfg *C, def C, fields map[string]string, validate func() error) error {
	v, d := reflect.ValueOf(cfg).Elem(), reflect.ValueOf(def)
	var errs []string
	for field, flag := range fields {
		if c.IsSet(flag) && v.FieldByName(field).IsZero() && !d.FieldByName(field).IsZero() {
			errs = append(errs, fmt.Sprintf("--%s: 0 is not a value of its own (the configuration takes zero for the default, %v): "+
				"give the value you want, or leave --%s out for the default", flag, d.FieldByName(field).Interface(), flag))
		}
	}
	if len(errs) > 0 {
		slices.Sort(errs)
		return errors.New(strings.Join(errs, "\n"))
	}
	if err := validate(); err != nil {
		return flagErrors(err, fields)
	}
	return nil
}

// boundFields maps the name of each field of *cfg (a pointer to a
// struct) that a flag of flags is bound to, to that flag's name.
func boundFields(cfg any, flags []ucli.Flag) map[string]string {
	v := reflect.ValueOf(cfg).Elem()
	byAddr := map[uintptr]string{}
	for i := range v.NumField() {
		if f := v.Type().Field(i); f.IsExported() {
			byAddr[v.Field(i).Addr().Pointer()] = f.Name
		}
	}
	fields := map[string]string{}
	for _, fl := range flags {
		if p, ok := destination(fl); ok {
			if name, ok := byAddr[p]; ok {
				fields[name] = fl.Names()[0]
			}
		}
	}
	return fields
}

// destination is the address a flag is bound to, if it is bound.
func destination(fl ucli.Flag) (uintptr, bool) {
	v := reflect.ValueOf(fl)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return 0, false
	}
	d := v.Elem().FieldByName("Destination")
	if !d.IsValid() || d.Kind() != reflect.Pointer || d.IsNil() {
		return 0, false
	}
	return d.Pointer(), true
}

// configFielder is an error about one field of a Config (intake's,
// projector's, ledger's ConfigError).
type configFielder interface {
	error
	ConfigField() string
}

// flagErrors tells the errors of a Config's check as its flags' errors:
// each error about a field fields binds to a flag is prefixed with that
// flag ("--rate: the votes per second of one principal must be ..."), one
// a line. An error without a field (or none bound) is told as it is.
func flagErrors(err error, fields map[string]string) error {
	var lines []string
	for _, e := range leafErrors(err) {
		var cf configFielder
		if errors.As(e, &cf) {
			if flag, ok := fields[cf.ConfigField()]; ok {
				lines = append(lines, fmt.Sprintf("--%s: %s", flag, cf.Error()))
				continue
			}
		}
		lines = append(lines, e.Error())
	}
	return errors.New(strings.Join(lines, "\n"))
}

// leafErrors are the errors err joins (errors.Join), through any
// wrapping; err alone when it joins none.
func leafErrors(err error) []error {
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		var out []error
		for _, e := range u.Unwrap() {
			out = append(out, leafErrors(e)...)
		}
		return out
	case configFielder:
		return []error{err}
	case interface{ Unwrap() error }:
		if inner := u.Unwrap(); inner != nil {
			return leafErrors(inner)
		}
	}
	return []error{err}
}
