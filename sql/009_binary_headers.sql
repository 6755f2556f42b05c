-- Headers byte-exact (docs/design.md, records): record failures and dead letters keep headers as
-- an ordered JSON list of [key, base64 value or null], so repeated keys and any bytes survive a
-- dead letter and its retry. The old form, an object of decoded strings, is converted in place
-- (its order and repeated keys were already lost; its values are kept as their UTF-8 bytes).

CREATE FUNCTION pg_temp.headers_as_pairs(old jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN old IS NULL OR jsonb_typeof(old) = 'null' THEN '[]'::jsonb
        WHEN jsonb_typeof(old) = 'array' THEN old
        ELSE coalesce(
            (SELECT jsonb_agg(
                        jsonb_build_array(
                            e.key,
                            CASE WHEN jsonb_typeof(e.value) = 'null' THEN NULL
                                 ELSE translate(encode(convert_to(e.value #>> '{}', 'UTF8'),
                                                       'base64'), E'\n', '')
                            END)
                        ORDER BY e.key)
             FROM jsonb_each(old) AS e),
            '[]'::jsonb)
    END
$$;

UPDATE record_failures SET headers = pg_temp.headers_as_pairs(headers)
    WHERE headers IS NULL OR jsonb_typeof(headers) <> 'array';
UPDATE dead_letters SET headers = pg_temp.headers_as_pairs(headers)
    WHERE headers IS NULL OR jsonb_typeof(headers) <> 'array';

ALTER TABLE record_failures
    ALTER COLUMN headers SET DEFAULT '[]',
    ALTER COLUMN headers SET NOT NULL,
    ADD CONSTRAINT record_failures_headers_pairs CHECK (jsonb_typeof(headers) = 'array');
ALTER TABLE dead_letters
    ALTER COLUMN headers SET DEFAULT '[]',
    ALTER COLUMN headers SET NOT NULL,
    ADD CONSTRAINT dead_letters_headers_pairs CHECK (jsonb_typeof(headers) = 'array');
COMMENT ON COLUMN record_failures.headers IS 'ordered [[key, base64 value or null], ...]';
COMMENT ON COLUMN dead_letters.headers IS 'ordered [[key, base64 value or null], ...]';
