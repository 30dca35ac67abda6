package config

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"
)

// EnvPrefix is the prefix of the environment variables that override keys
// of the cluster file: XKEEPER_KEEPER_TICK overrides keeper.tick.
const EnvPrefix = "XKEEPER"

// Load reads the cluster file at path, applies the defaults and the
// environment overrides, refuses unknown keys and validates the result.
// Each problem found is one line of the error, naming the key, as in
// `config: unknown key "keeper.tik"`; only errors reading or parsing the
// file name the file.
func Load(path string) (*Cluster, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var file map[string]any
	if err := yaml.Unmarshal(raw, &file); err != nil {
		return nil, fmt.Errorf("config: %s: %w", path, err)
	}
	// Viper drops a key whose value is null or an empty map before
	// UnmarshalExact can see it, so unknown keys are looked for here, in
	// the file as written.
	var errs []error
	unknownKeys(&errs, "", reflect.TypeFor[Cluster](), file)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	v := viper.New()
	v.SetEnvPrefix(EnvPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	// Viper consults the environment only for keys it already knows, from
	// the file, a default or a binding; a default for every keeper key lets
	// XKEEPER_KEEPER_* set keys the file leaves out.
	for key, value := range keeperDefaults() {
		v.SetDefault(key, value)
	}
	// The secrets are meant to come from the environment.
	v.SetDefault("security.cluster_secret", "")
	v.SetDefault("security.auth", "")
	v.SetDefault("audit.journal_max_age", "0s")
	if err := v.MergeConfigMap(file); err != nil {
		return nil, fmt.Errorf("config: %s: %w", path, err)
	}
	var c Cluster
	if err := v.UnmarshalExact(&c, viper.DecodeHook(durationHook)); err != nil {
		return nil, decodeError(err)
	}
	c.PlaceOnNodes()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// unknownKeys appends an error for every key of value, a map decoded into
// the struct type t, that t has no field for, and for every key repeated in
// another case (viper ignores case and would keep either one). Values of
// the wrong shape are left to the decoder to report.
func unknownKeys(errs *[]error, prefix string, t reflect.Type, value any) {
	m, ok := value.(map[string]any)
	if mm, isAny := value.(map[any]any); isAny { // a key YAML read as a number or bool
		m, ok = make(map[string]any, len(mm)), true
		for k, e := range mm {
			m[fmt.Sprint(k)] = e
		}
	}
	if !ok {
		return
	}
	fields := map[string]reflect.Type{}
	addFields(fields, t)
	keys := slices.Sorted(maps.Keys(m))
	seen := make(map[string]string, len(keys))
	for _, k := range keys {
		key := k
		if prefix != "" {
			key = prefix + "." + k
		}
		lower := strings.ToLower(k)
		if first, ok := seen[lower]; ok {
			*errs = append(*errs, fmt.Errorf("config: key %q repeats key %q", key, first))
			continue
		}
		seen[lower] = key
		ft, ok := fields[lower]
		if !ok {
			*errs = append(*errs, fmt.Errorf("config: unknown key %q", key))
			continue
		}
		switch {
		case ft.Kind() == reflect.Struct:
			unknownKeys(errs, key, ft, m[k])
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			list, _ := m[k].([]any)
			for i, e := range list {
				unknownKeys(errs, fmt.Sprintf("%s[%d]", key, i), ft.Elem(), e)
			}
		}
	}
}

// addFields maps each mapstructure key of struct type t to its field's
// type; the fields of a squashed embedded struct are t's own.
func addFields(fields map[string]reflect.Type, t reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		if tag := f.Tag.Get("mapstructure"); tag == ",squash" {
			addFields(fields, f.Type)
		} else {
			fields[tag] = f.Type
		}
	}
}

// keeperDefaults returns Default() keyed by full viper key ("keeper.tick"),
// read from the mapstructure tags so that no key can be forgotten.
func keeperDefaults() map[string]any {
	d := reflect.ValueOf(Default())
	t := d.Type()
	out := make(map[string]any, t.NumField())
	for i := range t.NumField() {
		out["keeper."+t.Field(i).Tag.Get("mapstructure")] = d.Field(i).Interface()
	}
	return out
}

var durationType = reflect.TypeFor[time.Duration]()

// durationHook decodes Go duration strings into time.Duration. A bare number
// other than 0 is refused: mapstructure would read it as nanoseconds.
func durationHook(from, to reflect.Type, data any) (any, error) {
	if to != durationType || from == durationType {
		return data, nil
	}
	if s, ok := data.(string); ok {
		return time.ParseDuration(strings.TrimSpace(s))
	}
	if data == nil || reflect.ValueOf(data).IsZero() {
		return time.Duration(0), nil
	}
	return nil, fmt.Errorf("%v is not a duration; give a unit, as in \"2s\" or \"500ms\"", data)
}

// decodeError rewrites mapstructure's errors ("'keeper.tick' time: ...") to
// name the key the way the other errors of the package do.
func decodeError(err error) error {
	var errs []error
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		var de *mapstructure.DecodeError
		if errors.As(err, &de) {
			errs = append(errs, fmt.Errorf("config: %s: %w", de.Name(), de.Unwrap()))
			return
		}
		errs = append(errs, fmt.Errorf("config: %w", err))
	}
	walk(err)
	return errors.Join(errs...)
}
