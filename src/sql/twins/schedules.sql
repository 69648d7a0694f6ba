-- Twins of src/schedules.rs: when a schedule's ticks fall, in PL/pgSQL. jobq._cron_next and
-- jobq._cron_latest answer as the extension's Rust does (the croner crate's parser and
-- calendar walk, chrono-tz's zones), with the same errors (SQLSTATE 22023, the same texts);
-- scripts/check-cron-twin.sh compares the two on a large set of expressions, zones and times.
--
-- The steps, one function each:
--   jobq._cron_parse   the expression (five fields, six with seconds first, or a nickname)
--                      into a spec: a bitmap per field, as croner's parser builds it
--                      (jobq._cron_field parses one field, jobq._cron_number one number)
--   jobq._cron_zone    the time zone: an IANA name as chrono-tz knows it, else NULL
--   jobq._cron_month   which days of a month match (jobq._cron_days: of a given month)
--   jobq._cron_wall    the next (previous) matching wall-clock time, in the zone's local time
--   jobq._cron_resolve a wall-clock time to its instant(s): one, two (fall-back) or none (gap)
--   jobq._cron_tick    the first tick after (last at or before) an instant: jobq's DST rules
--
-- Ticks are wall-clock times that match, in the schedule's zone, each turned into an instant:
-- - a wall-clock time the zone repeats (fall-back) ticks once, at its first instant;
-- - a wall-clock time a spring-forward skips: a schedule of fixed times (one second, minute
--   and hour) ticks once at the first instant after the gap (if the day after the gap still
--   matches, as croner checks); any other schedule has no tick inside the gap.
-- Those instants grow with the wall-clock time, so the next tick after an instant is the tick
-- of the first matching wall-clock time past the instant's own (past the end of the repeated
-- range when the instant is in its second pass), and the latest tick the mirror of that.
--
-- Where the two may differ (scripts/check-cron-twin.sh shows the first apart):
-- - time zones: the same IANA names as chrono-tz 0.10.4 (tzdata 2025b), with PostgreSQL's copy
--   of their rules; chrono-tz has no daylight-saving time after 2099, PostgreSQL has;
-- - croner gives up past year 5000 (before year 1 backward); at that edge it still finds a
--   tick reached without a carry from within 5000-01-01 (0001-12-31), which this does not;
-- - the message for a character outside ASCII: upper() follows the database's LC_CTYPE (C:
--   ASCII only), Rust's to_uppercase() all of Unicode (ß, the ligatures ﬀ-ﬆ are copied);
-- - a time zone the server's tzdata lacks: PostgreSQL's own 22023 error.

-- The IANA name `time_zone` as PostgreSQL should be given it, or NULL when chrono-tz does not
-- know it. The names are chrono-tz 0.10.4's (tzdata 2025b): pg_timezone_names's, less posix/*,
-- Factory, localtime and posixrules, but a lookup there reads every zone file (30 ms).
-- PostgreSQL also takes POSIX-style strings, abbreviations and names in any case, which jobq
-- refuses. A name without a slash is given as the zone it links to: PostgreSQL looks a zone up
-- among abbreviations first (timezone_abbreviations), where CET, EET, MET and WET are fixed
-- offsets but zones with summer time in tzdata.
CREATE FUNCTION jobq._cron_zone(time_zone text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_zone text;
BEGIN
    IF NOT time_zone = ANY (ARRAY[
        'Africa/Abidjan', 'Africa/Accra', 'Africa/Addis_Ababa', 'Africa/Algiers', 'Africa/Asmara',
        'Africa/Asmera', 'Africa/Bamako', 'Africa/Bangui', 'Africa/Banjul', 'Africa/Bissau',
        'Africa/Blantyre', 'Africa/Brazzaville', 'Africa/Bujumbura', 'Africa/Cairo',
        'Africa/Casablanca', 'Africa/Ceuta', 'Africa/Conakry', 'Africa/Dakar',
        'Africa/Dar_es_Salaam', 'Africa/Djibouti', 'Africa/Douala', 'Africa/El_Aaiun',
        'Africa/Freetown', 'Africa/Gaborone', 'Africa/Harare', 'Africa/Johannesburg',
        'Africa/Juba', 'Africa/Kampala', 'Africa/Khartoum', 'Africa/Kigali', 'Africa/Kinshasa',
        'Africa/Lagos', 'Africa/Libreville', 'Africa/Lome', 'Africa/Luanda', 'Africa/Lubumbashi',
        'Africa/Lusaka', 'Africa/Malabo', 'Africa/Maputo', 'Africa/Maseru', 'Africa/Mbabane',
        'Africa/Mogadishu', 'Africa/Monrovia', 'Africa/Nairobi', 'Africa/Ndjamena',
        'Africa/Niamey', 'Africa/Nouakchott', 'Africa/Ouagadougou', 'Africa/Porto-Novo',
        'Africa/Sao_Tome', 'Africa/Timbuktu', 'Africa/Tripoli', 'Africa/Tunis', 'Africa/Windhoek',
        'America/Adak', 'America/Anchorage', 'America/Anguilla', 'America/Antigua',
        'America/Araguaina', 'America/Argentina/Buenos_Aires', 'America/Argentina/Catamarca',
        'America/Argentina/ComodRivadavia', 'America/Argentina/Cordoba', 'America/Argentina/Jujuy',
        'America/Argentina/La_Rioja', 'America/Argentina/Mendoza',
        'America/Argentina/Rio_Gallegos', 'America/Argentina/Salta', 'America/Argentina/San_Juan',
        'America/Argentina/San_Luis', 'America/Argentina/Tucuman', 'America/Argentina/Ushuaia',
        'America/Aruba', 'America/Asuncion', 'America/Atikokan', 'America/Atka', 'America/Bahia',
        'America/Bahia_Banderas', 'America/Barbados', 'America/Belem', 'America/Belize',
        'America/Blanc-Sablon', 'America/Boa_Vista', 'America/Bogota', 'America/Boise',
        'America/Buenos_Aires', 'America/Cambridge_Bay', 'America/Campo_Grande', 'America/Cancun',
        'America/Caracas', 'America/Catamarca', 'America/Cayenne', 'America/Cayman',
        'America/Chicago', 'America/Chihuahua', 'America/Ciudad_Juarez', 'America/Coral_Harbour',
        'America/Cordoba', 'America/Costa_Rica', 'America/Coyhaique', 'America/Creston',
        'America/Cuiaba', 'America/Curacao', 'America/Danmarkshavn', 'America/Dawson',
        'America/Dawson_Creek', 'America/Denver', 'America/Detroit', 'America/Dominica',
        'America/Edmonton', 'America/Eirunepe', 'America/El_Salvador', 'America/Ensenada',
        'America/Fort_Nelson', 'America/Fort_Wayne', 'America/Fortaleza', 'America/Glace_Bay',
        'America/Godthab', 'America/Goose_Bay', 'America/Grand_Turk', 'America/Grenada',
        'America/Guadeloupe', 'America/Guatemala', 'America/Guayaquil', 'America/Guyana',
        'America/Halifax', 'America/Havana', 'America/Hermosillo', 'America/Indiana/Indianapolis',
        'America/Indiana/Knox', 'America/Indiana/Marengo', 'America/Indiana/Petersburg',
        'America/Indiana/Tell_City', 'America/Indiana/Vevay', 'America/Indiana/Vincennes',
        'America/Indiana/Winamac', 'America/Indianapolis', 'America/Inuvik', 'America/Iqaluit',
        'America/Jamaica', 'America/Jujuy', 'America/Juneau', 'America/Kentucky/Louisville',
        'America/Kentucky/Monticello', 'America/Knox_IN', 'America/Kralendijk', 'America/La_Paz',
        'America/Lima', 'America/Los_Angeles', 'America/Louisville', 'America/Lower_Princes',
        'America/Maceio', 'America/Managua', 'America/Manaus', 'America/Marigot',
        'America/Martinique', 'America/Matamoros', 'America/Mazatlan', 'America/Mendoza',
        'America/Menominee', 'America/Merida', 'America/Metlakatla', 'America/Mexico_City',
        'America/Miquelon', 'America/Moncton', 'America/Monterrey', 'America/Montevideo',
        'America/Montreal', 'America/Montserrat', 'America/Nassau', 'America/New_York',
        'America/Nipigon', 'America/Nome', 'America/Noronha', 'America/North_Dakota/Beulah',
        'America/North_Dakota/Center', 'America/North_Dakota/New_Salem', 'America/Nuuk',
        'America/Ojinaga', 'America/Panama', 'America/Pangnirtung', 'America/Paramaribo',
        'America/Phoenix', 'America/Port-au-Prince', 'America/Port_of_Spain', 'America/Porto_Acre',
        'America/Porto_Velho', 'America/Puerto_Rico', 'America/Punta_Arenas',
        'America/Rainy_River', 'America/Rankin_Inlet', 'America/Recife', 'America/Regina',
        'America/Resolute', 'America/Rio_Branco', 'America/Rosario', 'America/Santa_Isabel',
        'America/Santarem', 'America/Santiago', 'America/Santo_Domingo', 'America/Sao_Paulo',
        'America/Scoresbysund', 'America/Shiprock', 'America/Sitka', 'America/St_Barthelemy',
        'America/St_Johns', 'America/St_Kitts', 'America/St_Lucia', 'America/St_Thomas',
        'America/St_Vincent', 'America/Swift_Current', 'America/Tegucigalpa', 'America/Thule',
        'America/Thunder_Bay', 'America/Tijuana', 'America/Toronto', 'America/Tortola',
        'America/Vancouver', 'America/Virgin', 'America/Whitehorse', 'America/Winnipeg',
        'America/Yakutat', 'America/Yellowknife', 'Antarctica/Casey', 'Antarctica/Davis',
        'Antarctica/DumontDUrville', 'Antarctica/Macquarie', 'Antarctica/Mawson',
        'Antarctica/McMurdo', 'Antarctica/Palmer', 'Antarctica/Rothera', 'Antarctica/South_Pole',
        'Antarctica/Syowa', 'Antarctica/Troll', 'Antarctica/Vostok', 'Arctic/Longyearbyen',
        'Asia/Aden', 'Asia/Almaty', 'Asia/Amman', 'Asia/Anadyr', 'Asia/Aqtau', 'Asia/Aqtobe',
        'Asia/Ashgabat', 'Asia/Ashkhabad', 'Asia/Atyrau', 'Asia/Baghdad', 'Asia/Bahrain',
        'Asia/Baku', 'Asia/Bangkok', 'Asia/Barnaul', 'Asia/Beirut', 'Asia/Bishkek', 'Asia/Brunei',
        'Asia/Calcutta', 'Asia/Chita', 'Asia/Choibalsan', 'Asia/Chongqing', 'Asia/Chungking',
        'Asia/Colombo', 'Asia/Dacca', 'Asia/Damascus', 'Asia/Dhaka', 'Asia/Dili', 'Asia/Dubai',
        'Asia/Dushanbe', 'Asia/Famagusta', 'Asia/Gaza', 'Asia/Harbin', 'Asia/Hebron',
        'Asia/Ho_Chi_Minh', 'Asia/Hong_Kong', 'Asia/Hovd', 'Asia/Irkutsk', 'Asia/Istanbul',
        'Asia/Jakarta', 'Asia/Jayapura', 'Asia/Jerusalem', 'Asia/Kabul', 'Asia/Kamchatka',
        'Asia/Karachi', 'Asia/Kashgar', 'Asia/Kathmandu', 'Asia/Katmandu', 'Asia/Khandyga',
        'Asia/Kolkata', 'Asia/Krasnoyarsk', 'Asia/Kuala_Lumpur', 'Asia/Kuching', 'Asia/Kuwait',
        'Asia/Macao', 'Asia/Macau', 'Asia/Magadan', 'Asia/Makassar', 'Asia/Manila', 'Asia/Muscat',
        'Asia/Nicosia', 'Asia/Novokuznetsk', 'Asia/Novosibirsk', 'Asia/Omsk', 'Asia/Oral',
        'Asia/Phnom_Penh', 'Asia/Pontianak', 'Asia/Pyongyang', 'Asia/Qatar', 'Asia/Qostanay',
        'Asia/Qyzylorda', 'Asia/Rangoon', 'Asia/Riyadh', 'Asia/Saigon', 'Asia/Sakhalin',
        'Asia/Samarkand', 'Asia/Seoul', 'Asia/Shanghai', 'Asia/Singapore', 'Asia/Srednekolymsk',
        'Asia/Taipei', 'Asia/Tashkent', 'Asia/Tbilisi', 'Asia/Tehran', 'Asia/Tel_Aviv',
        'Asia/Thimbu', 'Asia/Thimphu', 'Asia/Tokyo', 'Asia/Tomsk', 'Asia/Ujung_Pandang',
        'Asia/Ulaanbaatar', 'Asia/Ulan_Bator', 'Asia/Urumqi', 'Asia/Ust-Nera', 'Asia/Vientiane',
        'Asia/Vladivostok', 'Asia/Yakutsk', 'Asia/Yangon', 'Asia/Yekaterinburg', 'Asia/Yerevan',
        'Atlantic/Azores', 'Atlantic/Bermuda', 'Atlantic/Canary', 'Atlantic/Cape_Verde',
        'Atlantic/Faeroe', 'Atlantic/Faroe', 'Atlantic/Jan_Mayen', 'Atlantic/Madeira',
        'Atlantic/Reykjavik', 'Atlantic/South_Georgia', 'Atlantic/St_Helena', 'Atlantic/Stanley',
        'Australia/ACT', 'Australia/Adelaide', 'Australia/Brisbane', 'Australia/Broken_Hill',
        'Australia/Canberra', 'Australia/Currie', 'Australia/Darwin', 'Australia/Eucla',
        'Australia/Hobart', 'Australia/LHI', 'Australia/Lindeman', 'Australia/Lord_Howe',
        'Australia/Melbourne', 'Australia/NSW', 'Australia/North', 'Australia/Perth',
        'Australia/Queensland', 'Australia/South', 'Australia/Sydney', 'Australia/Tasmania',
        'Australia/Victoria', 'Australia/West', 'Australia/Yancowinna', 'Brazil/Acre',
        'Brazil/DeNoronha', 'Brazil/East', 'Brazil/West', 'CET', 'CST6CDT', 'Canada/Atlantic',
        'Canada/Central', 'Canada/Eastern', 'Canada/Mountain', 'Canada/Newfoundland',
        'Canada/Pacific', 'Canada/Saskatchewan', 'Canada/Yukon', 'Chile/Continental',
        'Chile/EasterIsland', 'Cuba', 'EET', 'EST', 'EST5EDT', 'Egypt', 'Eire', 'Etc/GMT',
        'Etc/GMT+0', 'Etc/GMT+1', 'Etc/GMT+10', 'Etc/GMT+11', 'Etc/GMT+12', 'Etc/GMT+2',
        'Etc/GMT+3', 'Etc/GMT+4', 'Etc/GMT+5', 'Etc/GMT+6', 'Etc/GMT+7', 'Etc/GMT+8', 'Etc/GMT+9',
        'Etc/GMT-0', 'Etc/GMT-1', 'Etc/GMT-10', 'Etc/GMT-11', 'Etc/GMT-12', 'Etc/GMT-13',
        'Etc/GMT-14', 'Etc/GMT-2', 'Etc/GMT-3', 'Etc/GMT-4', 'Etc/GMT-5', 'Etc/GMT-6', 'Etc/GMT-7',
        'Etc/GMT-8', 'Etc/GMT-9', 'Etc/GMT0', 'Etc/Greenwich', 'Etc/UCT', 'Etc/UTC',
        'Etc/Universal', 'Etc/Zulu', 'Europe/Amsterdam', 'Europe/Andorra', 'Europe/Astrakhan',
        'Europe/Athens', 'Europe/Belfast', 'Europe/Belgrade', 'Europe/Berlin', 'Europe/Bratislava',
        'Europe/Brussels', 'Europe/Bucharest', 'Europe/Budapest', 'Europe/Busingen',
        'Europe/Chisinau', 'Europe/Copenhagen', 'Europe/Dublin', 'Europe/Gibraltar',
        'Europe/Guernsey', 'Europe/Helsinki', 'Europe/Isle_of_Man', 'Europe/Istanbul',
        'Europe/Jersey', 'Europe/Kaliningrad', 'Europe/Kiev', 'Europe/Kirov', 'Europe/Kyiv',
        'Europe/Lisbon', 'Europe/Ljubljana', 'Europe/London', 'Europe/Luxembourg', 'Europe/Madrid',
        'Europe/Malta', 'Europe/Mariehamn', 'Europe/Minsk', 'Europe/Monaco', 'Europe/Moscow',
        'Europe/Nicosia', 'Europe/Oslo', 'Europe/Paris', 'Europe/Podgorica', 'Europe/Prague',
        'Europe/Riga', 'Europe/Rome', 'Europe/Samara', 'Europe/San_Marino', 'Europe/Sarajevo',
        'Europe/Saratov', 'Europe/Simferopol', 'Europe/Skopje', 'Europe/Sofia', 'Europe/Stockholm',
        'Europe/Tallinn', 'Europe/Tirane', 'Europe/Tiraspol', 'Europe/Ulyanovsk',
        'Europe/Uzhgorod', 'Europe/Vaduz', 'Europe/Vatican', 'Europe/Vienna', 'Europe/Vilnius',
        'Europe/Volgograd', 'Europe/Warsaw', 'Europe/Zagreb', 'Europe/Zaporozhye', 'Europe/Zurich',
        'GB', 'GB-Eire', 'GMT', 'GMT+0', 'GMT-0', 'GMT0', 'Greenwich', 'HST', 'Hongkong',
        'Iceland', 'Indian/Antananarivo', 'Indian/Chagos', 'Indian/Christmas', 'Indian/Cocos',
        'Indian/Comoro', 'Indian/Kerguelen', 'Indian/Mahe', 'Indian/Maldives', 'Indian/Mauritius',
        'Indian/Mayotte', 'Indian/Reunion', 'Iran', 'Israel', 'Jamaica', 'Japan', 'Kwajalein',
        'Libya', 'MET', 'MST', 'MST7MDT', 'Mexico/BajaNorte', 'Mexico/BajaSur', 'Mexico/General',
        'NZ', 'NZ-CHAT', 'Navajo', 'PRC', 'PST8PDT', 'Pacific/Apia', 'Pacific/Auckland',
        'Pacific/Bougainville', 'Pacific/Chatham', 'Pacific/Chuuk', 'Pacific/Easter',
        'Pacific/Efate', 'Pacific/Enderbury', 'Pacific/Fakaofo', 'Pacific/Fiji',
        'Pacific/Funafuti', 'Pacific/Galapagos', 'Pacific/Gambier', 'Pacific/Guadalcanal',
        'Pacific/Guam', 'Pacific/Honolulu', 'Pacific/Johnston', 'Pacific/Kanton',
        'Pacific/Kiritimati', 'Pacific/Kosrae', 'Pacific/Kwajalein', 'Pacific/Majuro',
        'Pacific/Marquesas', 'Pacific/Midway', 'Pacific/Nauru', 'Pacific/Niue', 'Pacific/Norfolk',
        'Pacific/Noumea', 'Pacific/Pago_Pago', 'Pacific/Palau', 'Pacific/Pitcairn',
        'Pacific/Pohnpei', 'Pacific/Ponape', 'Pacific/Port_Moresby', 'Pacific/Rarotonga',
        'Pacific/Saipan', 'Pacific/Samoa', 'Pacific/Tahiti', 'Pacific/Tarawa', 'Pacific/Tongatapu',
        'Pacific/Truk', 'Pacific/Wake', 'Pacific/Wallis', 'Pacific/Yap', 'Poland', 'Portugal',
        'ROC', 'ROK', 'Singapore', 'Turkey', 'UCT', 'US/Alaska', 'US/Aleutian', 'US/Arizona',
        'US/Central', 'US/East-Indiana', 'US/Eastern', 'US/Hawaii', 'US/Indiana-Starke',
        'US/Michigan', 'US/Mountain', 'US/Pacific', 'US/Samoa', 'UTC', 'Universal', 'W-SU', 'WET',
        'Zulu'
    ]) THEN
        RETURN NULL;
    END IF;
    v_zone := CASE time_zone
        WHEN 'CET' THEN 'Europe/Brussels'       WHEN 'CST6CDT' THEN 'America/Chicago'
        WHEN 'Cuba' THEN 'America/Havana'       WHEN 'EET' THEN 'Europe/Athens'
        WHEN 'EST' THEN 'America/Panama'        WHEN 'EST5EDT' THEN 'America/New_York'
        WHEN 'Egypt' THEN 'Africa/Cairo'        WHEN 'Eire' THEN 'Europe/Dublin'
        WHEN 'GB' THEN 'Europe/London'          WHEN 'GB-Eire' THEN 'Europe/London'
        WHEN 'GMT' THEN 'Etc/GMT'               WHEN 'GMT+0' THEN 'Etc/GMT'
        WHEN 'GMT-0' THEN 'Etc/GMT'             WHEN 'GMT0' THEN 'Etc/GMT'
        WHEN 'Greenwich' THEN 'Etc/GMT'         WHEN 'HST' THEN 'Pacific/Honolulu'
        WHEN 'Hongkong' THEN 'Asia/Hong_Kong'   WHEN 'Iceland' THEN 'Africa/Abidjan'
        WHEN 'Iran' THEN 'Asia/Tehran'          WHEN 'Israel' THEN 'Asia/Jerusalem'
        WHEN 'Jamaica' THEN 'America/Jamaica'   WHEN 'Japan' THEN 'Asia/Tokyo'
        WHEN 'Kwajalein' THEN 'Pacific/Kwajalein' WHEN 'Libya' THEN 'Africa/Tripoli'
        WHEN 'MET' THEN 'Europe/Brussels'       WHEN 'MST' THEN 'America/Phoenix'
        WHEN 'MST7MDT' THEN 'America/Denver'    WHEN 'NZ' THEN 'Pacific/Auckland'
        WHEN 'NZ-CHAT' THEN 'Pacific/Chatham'   WHEN 'Navajo' THEN 'America/Denver'
        WHEN 'PRC' THEN 'Asia/Shanghai'         WHEN 'PST8PDT' THEN 'America/Los_Angeles'
        WHEN 'Poland' THEN 'Europe/Warsaw'      WHEN 'Portugal' THEN 'Europe/Lisbon'
        WHEN 'ROC' THEN 'Asia/Taipei'           WHEN 'ROK' THEN 'Asia/Seoul'
        WHEN 'Singapore' THEN 'Asia/Singapore'  WHEN 'Turkey' THEN 'Europe/Istanbul'
        WHEN 'UCT' THEN 'Etc/UTC'               WHEN 'UTC' THEN 'Etc/UTC'
        WHEN 'Universal' THEN 'Etc/UTC'         WHEN 'W-SU' THEN 'Europe/Moscow'
        WHEN 'WET' THEN 'Europe/Lisbon'         WHEN 'Zulu' THEN 'Etc/UTC'
        ELSE time_zone END;
    -- (A server whose tzdata lacks the zone refuses it at its first conversion, with 22023 and
    -- its own text: catching that would take a subtransaction, which a parallel worker cannot.)
    RETURN v_zone;
END $$;

-- A number as Rust's str::parse of an unsigned integer reads it (digits only, any leading
-- zeros, at most `max`: 65535 for croner's u16, 255 for its u8), else NULL.
CREATE FUNCTION jobq._cron_number(s text, max integer) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    RETURN CASE WHEN s ~ '^[0-9]+$' AND length(ltrim(s, '0')) <= 5 AND ('0' || ltrim(s, '0'))::integer <= max
                THEN ('0' || ltrim(s, '0'))::integer END;
END $$;

-- A bitmap (a string of '0' and '1') of `len` positions with '1' at `first`, `first` + `step`,
-- ... up to `last` (positions count from 1), ORed into `bits`.
CREATE FUNCTION jobq._cron_bits(bits text, first integer, last integer, step integer) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    RETURN (bits::varbit
            | (repeat('0', first - 1)
               || left(repeat('1' || repeat('0', step - 1), (last - first) / step + 1), last - first + 1)
               || repeat('0', length(bits) - last))::varbit)::text;
END $$;

-- One field of the expression, as croner's CronComponent::parse reads it: `lo`..`hi` its
-- values, `kind` 'dom' (day of month: W and L allowed), 'dow' (day of week: # and L allowed)
-- or 'plain'. Out: bitmaps ('1' at 1 + value - lo) of the values it matches (all_b) and of
-- the days of month with W (w_b); for the day of week, n#k (nth_b, at value * 5 + k) and nL
-- (last_b, at 1 + value); whether L (l_feature) or LW (w_feature too) was given alone; the
-- step of its last stepped part and whether it used * (what makes a schedule of fixed times);
-- or croner's error text (err).
CREATE FUNCTION jobq._cron_field(field text, lo integer, hi integer, kind text,
    OUT all_b text, OUT w_b text, OUT nth_b text, OUT last_b text,
    OUT l_feature boolean, OUT w_feature boolean, OUT step integer, OUT wildcard boolean, OUT err text)
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_part   text;
    v_mode   text;      -- 'step', 'range', 'number'
    v_bit    integer;   -- 0: the value, 1..5: #n, 6: L
    v_clean  text;      -- the part without its #n
    v_items  text[];
    v_a      integer;
    v_b      integer;
    v_s      integer;
BEGIN
    all_b := repeat('0', hi - lo + 1);
    w_b := all_b;
    nth_b := repeat('0', 40);
    last_b := repeat('0', 8);
    l_feature := false;
    w_feature := false;
    step := 1;
    wildcard := false;
    IF field = '*' THEN
        wildcard := true;
        all_b := repeat('1', hi - lo + 1);
        RETURN;
    END IF;
    FOREACH v_part IN ARRAY string_to_array(field, ',') LOOP
        CONTINUE WHEN v_part = '';
        IF strpos(v_part, '/') > 0 THEN
            v_mode := 'step';
        ELSIF strpos(v_part, '-') > 0 THEN
            v_mode := 'range';
        ELSIF strpos(v_part, 'W') > 0 THEN
            -- nW: the weekday closest to day n; LW: the last weekday of the month.
            IF split_part(v_part, 'W', 1) = 'L' THEN
                l_feature := true;
                w_feature := true;
                CONTINUE;
            END IF;
            v_a := jobq._cron_number(split_part(v_part, 'W', 1), 65535);
            IF v_a IS NULL THEN
                err := 'Component error: Invalid day for closest weekday.';
                RETURN;
            ELSIF v_a < lo OR v_a > hi THEN
                err := 'Component error: Day for closest weekday out of bounds.';
                RETURN;
            END IF;
            w_b := jobq._cron_bits(w_b, v_a - lo + 1, v_a - lo + 1, 1);
            CONTINUE;
        ELSIF v_part = 'L' THEN
            l_feature := true;   -- the last day of the month (alone in the day of week: nothing)
            CONTINUE;
        ELSE
            IF right(v_part, 1) = 'L' AND strpos(v_part, '#') = 0 THEN
                v_part := replace(v_part, 'L', '#L');   -- 5L: the last Friday
            END IF;
            IF strpos(v_part, '#') > 0 AND kind <> 'dow' THEN
                err := 'Component error: Nth specifier # not allowed in the current field.';
                RETURN;
            ELSIF strpos(v_part, 'L') > 0 AND kind <> 'dow' THEN
                err := 'Component error: L not allowed in the current field.';
                RETURN;
            END IF;
            v_mode := 'number';
        END IF;
        -- Which bit the part sets: L (last), #n (nth) or the plain value.
        IF right(v_part, 1) = 'L' THEN
            v_bit := 6;
        ELSIF strpos(v_part, '#') > 0 THEN
            v_bit := jobq._cron_number(substr(v_part, strpos(v_part, '#') + 1), 255);
            IF v_bit IS NULL THEN
                err := 'Component error: Invalid nth specifier.';
                RETURN;
            ELSIF v_bit = 0 OR v_bit > 5 THEN
                err := 'Component error: Nth specifier out of bounds.';
                RETURN;
            END IF;
        ELSE
            v_bit := 0;
        END IF;
        v_clean := split_part(v_part, '#', 1);
        IF v_mode = 'number' THEN
            v_a := jobq._cron_number(v_clean, 65535);
            IF v_a IS NULL THEN
                err := 'Component error: Invalid number.';
                RETURN;
            ELSIF v_a < lo OR v_a > hi THEN
                err := 'Component error: Number out of bounds.';
                RETURN;
            END IF;
            v_b := v_a;
            v_s := 1;
        ELSIF v_mode = 'range' THEN
            v_items := string_to_array(v_clean, '-');
            IF cardinality(v_items) <> 2 THEN
                err := 'Component error: Invalid range syntax.';
                RETURN;
            END IF;
            v_a := jobq._cron_number(v_items[1], 65535);
            v_b := jobq._cron_number(v_items[2], 65535);
            IF v_a IS NULL THEN
                err := 'Component error: Invalid start of range.';
                RETURN;
            ELSIF v_b IS NULL THEN
                err := 'Component error: Invalid end of range.';
                RETURN;
            ELSIF v_a > v_b OR v_a < lo OR v_b > hi THEN
                err := 'Component error: Range out of bounds.';
                RETURN;
            END IF;
            v_s := 1;
        ELSE
            v_items := string_to_array(v_clean, '/');
            IF cardinality(v_items) <> 2 THEN
                err := 'Component error: Invalid stepped range syntax.';
                RETURN;
            END IF;
            v_s := jobq._cron_number(v_items[2], 65535);
            IF v_s IS NULL THEN
                err := 'Component error: Invalid step.';
                RETURN;
            END IF;
            step := v_s;
            IF v_s = 0 THEN
                err := 'Component error: Step cannot be zero.';
                RETURN;
            END IF;
            IF v_items[1] = '*' THEN
                wildcard := true;
                v_a := lo;
                v_b := hi;
            ELSIF strpos(v_items[1], '-') > 0 THEN
                IF cardinality(string_to_array(v_items[1], '-')) <> 2 THEN
                    err := 'Component error: Invalid range syntax in stepping.';
                    RETURN;
                END IF;
                v_a := jobq._cron_number(split_part(v_items[1], '-', 1), 65535);
                v_b := jobq._cron_number(split_part(v_items[1], '-', 2), 65535);
                IF v_a IS NULL THEN
                    err := 'Component error: Invalid range start.';
                    RETURN;
                ELSIF v_b IS NULL THEN
                    err := 'Component error: Invalid range end.';
                    RETURN;
                END IF;
            ELSIF v_items[1] = '' THEN
                err := format('Component error: Invalid step syntax: omitting the starting point like "/%1$s" is not allowed. Use "*/%1$s" for wildcard steps or "X-Y/%1$s" for range steps.', v_items[2]);
                RETURN;
            ELSE
                err := format('Component error: Invalid step syntax: single number steps like "%1$s/%2$s" are not allowed. Use "*/%2$s" for wildcard steps or "X-Y/%2$s" for range steps.', v_items[1], v_items[2]);
                RETURN;
            END IF;
            IF v_a < lo OR v_b > hi OR v_a > v_b THEN
                err := 'Component error: Range is out of bounds in stepping.';
                RETURN;
            END IF;
            -- croner counts in u16: a step past 65535 from the last value is an error.
            IF v_a + (v_b - v_a) / v_s * v_s + v_s > 65535 THEN
                err := 'Component error: Value exceeded max after stepping.';
                RETURN;
            END IF;
        END IF;
        -- The bit on v_a, v_a + v_s, ... up to v_b.
        IF v_bit = 0 THEN
            all_b := jobq._cron_bits(all_b, v_a - lo + 1, v_b - lo + 1, v_s);
        ELSIF v_bit = 6 THEN
            last_b := jobq._cron_bits(last_b, v_a + 1, v_b + 1, v_s);
        ELSE
            nth_b := jobq._cron_bits(nth_b, v_a * 5 + v_bit, v_b * 5 + v_bit, v_s * 5);
        END IF;
    END LOOP;
END $$;

-- The expression `cron`, checked as src/schedules.rs checks it (Schedule::parse) and parsed as
-- croner's CronParser (seconds optional, no year field) parses it, into a spec:
--   [1] seconds, [2] minutes (60 characters each, '1' at 1 + the value), [3] hours (24),
--   [4] days of month (31, at the day), [5] months (12, at the month),
--   [6] days of week (7, at 1 + the weekday, 0 = Sunday), [7] #n days of week (35, at
--   weekday * 5 + n), [8] L days of week (7), [9] W days of month (31),
--   [10] six flags: L alone, LW, day of month *, day of week *, both days must match (a '+'
--   before the day of week), fixed time (one second, one minute and one hour, none of them
--   by * or a step).
-- Raises 22023 for an expression that is not one, with the Rust's texts.
CREATE FUNCTION jobq._cron_parse(cron text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    -- Rust's whitespace (char::is_whitespace), which trim() and split_whitespace() go by.
    c_space  constant text := '[\t\n\v\f\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]+';
    v_expr   text := regexp_replace(cron, '^' || c_space || '|' || c_space || '$', '', 'g');
    v_upper  text;
    v_parts  text[];
    v_n      integer;
    v_and    boolean := false;
    v_allowed text;
    v_ch     text;
    f        record;
    v_spec   text[] := '{}';
    v_flags  text;
    v_fixed  boolean := true;
BEGIN
    -- jobq's own checks, with its texts.
    v_n := CASE WHEN v_expr = '' THEN 0 ELSE cardinality(regexp_split_to_array(v_expr, c_space)) END;
    IF left(v_expr, 1) = '@' THEN
        IF translate(v_expr, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')
           NOT IN ('@yearly', '@annually', '@monthly', '@weekly', '@daily', '@hourly') THEN
            RAISE EXCEPTION 'jobq: unknown cron nickname "%" (use @yearly, @annually, @monthly, @weekly, @daily or @hourly)', v_expr
                USING ERRCODE = '22023';
        END IF;
    ELSIF v_n NOT IN (5, 6) THEN
        RAISE EXCEPTION 'jobq: cron expression "%" has % fields: it needs five (minute hour day-of-month month day-of-week) or six (seconds first)', v_expr, v_n
            USING ERRCODE = '22023';
    END IF;

    -- croner: upper case (Rust's: ß is SS, ligatures are their letters), nicknames, names of
    -- days and months, then the fields.
    v_upper := upper(replace(replace(replace(replace(replace(replace(replace(replace(v_expr,
                   'ß', 'SS'), 'ﬀ', 'FF'), 'ﬁ', 'FI'), 'ﬂ', 'FL'), 'ﬃ', 'FFI'), 'ﬄ', 'FFL'), 'ﬅ', 'ST'), 'ﬆ', 'ST'));
    v_parts := regexp_split_to_array(CASE v_upper
            WHEN '@YEARLY' THEN '0 0 1 1 *' WHEN '@ANNUALLY' THEN '0 0 1 1 *'
            WHEN '@MONTHLY' THEN '0 0 1 * *' WHEN '@WEEKLY' THEN '0 0 * * 0'
            WHEN '@DAILY' THEN '0 0 * * *' WHEN '@HOURLY' THEN '0 * * * *'
            ELSE replace(replace(replace(replace(replace(replace(replace(replace(replace(replace(replace(
                 replace(replace(replace(replace(replace(replace(replace(replace(replace(
                     v_upper, '-SUN', '-7'), 'SUN', '0'), 'MON', '1'), 'TUE', '2'), 'WED', '3'),
                     'THU', '4'), 'FRI', '5'), 'SAT', '6'),
                     'JAN', '1'), 'FEB', '2'), 'MAR', '3'), 'APR', '4'), 'MAY', '5'), 'JUN', '6'),
                     'JUL', '7'), 'AUG', '8'), 'SEP', '9'), 'OCT', '10'), 'NOV', '11'), 'DEC', '12')
        END, c_space);
    IF cardinality(v_parts) = 5 THEN
        v_parts := '0'::text || v_parts;     -- the seconds field, when omitted
    END IF;
    v_parts := v_parts || '*'::text;   -- the year field, always *
    -- ? is * in the day fields; a '+' before the day of week asks both day fields to match.
    v_parts[4] := replace(v_parts[4], '?', '*');
    v_parts[6] := replace(v_parts[6], '?', '*');
    IF left(v_parts[6], 1) = '+' THEN
        v_and := true;
        v_parts[6] := substr(v_parts[6], 2);
    END IF;
    FOR i IN 1..7 LOOP
        v_allowed := '*/0123456789,-' || CASE i WHEN 4 THEN 'LW?' WHEN 6 THEN '#L?' ELSE '' END;
        v_ch := substring(v_parts[i] FROM '[^' || replace(v_allowed, '-', '') || '-]');
        IF v_ch IS NOT NULL THEN
            RAISE EXCEPTION 'jobq: invalid cron expression "%": Pattern contains illegal characters: CronPattern contains illegal character ''%'' in part ''%''', v_expr, v_ch, v_parts[i]
                USING ERRCODE = '22023';
        END IF;
    END LOOP;

    -- The fields, in croner's order (its first error is the one reported).
    FOR i IN 1..6 LOOP
        f := jobq._cron_field(v_parts[i], (ARRAY[0, 0, 0, 1, 1, 0])[i], (ARRAY[59, 59, 23, 31, 12, 7])[i],
                              (ARRAY['plain', 'plain', 'plain', 'dom', 'plain', 'dow'])[i]);
        IF f.err IS NOT NULL THEN
            RAISE EXCEPTION 'jobq: invalid cron expression "%": %', v_expr, f.err USING ERRCODE = '22023';
        END IF;
        v_spec[i] := f.all_b;
        v_fixed := v_fixed AND (i > 3 OR (f.step = 1 AND NOT f.wildcard AND length(replace(f.all_b, '0', '')) = 1));
        IF i = 4 THEN
            v_spec[9] := f.w_b;
            v_flags := concat(f.l_feature::integer, f.w_feature::integer);
        ELSIF i = 6 THEN
            -- Day of week 7 is Sunday, 0.
            v_spec[6] := (left(f.all_b, 1)::varbit | right(f.all_b, 1)::varbit)::text || substr(f.all_b, 2, 6);
            v_spec[7] := (left(f.nth_b, 5)::varbit | right(f.nth_b, 5)::varbit)::text || substr(f.nth_b, 6, 30);
            v_spec[8] := (left(f.last_b, 1)::varbit | right(f.last_b, 1)::varbit)::text || substr(f.last_b, 2, 6);
        END IF;
    END LOOP;
    v_spec[10] := concat(v_flags, (v_parts[4] = '*')::integer, (v_parts[6] = '*')::integer, v_and::integer,
                         v_fixed::integer);
    RETURN v_spec;
END $$;

-- The days of a month of `len` days whose 1st is weekday `wd1` (0 = Sunday) that `spec`
-- matches, as a string of `len` characters, '1' at each matching day: croner's day_match.
-- Day of month: the day, L (the last day), LW (the last weekday), nW (the weekday closest to
-- day n, in the month). Day of week: the weekday, n#k (its k-th in the month), nL (its last).
-- When both fields are restricted (neither is *), a day matches either, or with '+' both.
CREATE FUNCTION jobq._cron_month(spec text[], len integer, wd1 integer) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_dom   text := left(spec[4], len);   -- by day of month
    v_dow   text;                         -- by day of week
    v_wd    integer;
    v_k     integer;
BEGIN
    -- L: the last day; LW: the last weekday (Monday to Friday).
    IF substr(spec[10], 1, 1) = '1' THEN
        v_k := CASE WHEN substr(spec[10], 2, 1) = '0' THEN len
                    ELSE len - CASE (wd1 + len - 1) % 7 WHEN 6 THEN 1 WHEN 0 THEN 2 ELSE 0 END END;
        v_dom := overlay(v_dom PLACING '1' FROM v_k FOR 1);
    END IF;
    -- nW: day n if a weekday, else the Friday before or the Monday after, within the month.
    FOR v_k IN 1..CASE WHEN strpos(left(spec[9], len), '1') > 0 THEN len ELSE 0 END LOOP
        CONTINUE WHEN substr(spec[9], v_k, 1) = '0';
        v_wd := (wd1 + v_k - 1) % 7;
        v_dom := overlay(v_dom PLACING '1' FROM CASE
                     WHEN v_wd = 6 THEN CASE WHEN v_k > 1 THEN v_k - 1 ELSE v_k + 2 END
                     WHEN v_wd = 0 THEN CASE WHEN v_k < len THEN v_k + 1 ELSE v_k - 2 END
                     ELSE v_k END FOR 1);
    END LOOP;
    -- The weekdays, from the weekday of the 1st on.
    v_dow := left(repeat(substr(spec[6] || spec[6], wd1 + 1, 7), 5), len);
    -- n#k: the k-th weekday n; nL: the last.
    FOR v_wd IN 0..CASE WHEN strpos(spec[7] || spec[8], '1') > 0 THEN 6 ELSE -1 END LOOP
        FOR v_k IN 1..5 LOOP
            CONTINUE WHEN substr(spec[7], v_wd * 5 + v_k, 1) = '0'
                       OR 1 + (v_wd - wd1 + 7) % 7 + 7 * (v_k - 1) > len;
            v_dow := overlay(v_dow PLACING '1' FROM 1 + (v_wd - wd1 + 7) % 7 + 7 * (v_k - 1) FOR 1);
        END LOOP;
        CONTINUE WHEN substr(spec[8], v_wd + 1, 1) = '0';
        v_dow := overlay(v_dow PLACING '1' FROM len - ((wd1 + len - 1) % 7 - v_wd + 7) % 7 FOR 1);
    END LOOP;
    RETURN CASE
        WHEN substr(spec[10], 4, 1) = '1' THEN v_dom     -- day of week *
        WHEN substr(spec[10], 3, 1) = '1' THEN v_dow     -- day of month *
        WHEN substr(spec[10], 5, 1) = '1' THEN (v_dom::varbit & v_dow::varbit)::text
        ELSE (v_dom::varbit | v_dow::varbit)::text END;
END $$;

-- The matching days of month `m` of year `y` (jobq._cron_month's string).
CREATE FUNCTION jobq._cron_days(spec text[], y integer, m integer) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    RETURN jobq._cron_month(spec,
        CASE WHEN m = 2 THEN CASE WHEN (y % 4 = 0 AND y % 100 <> 0) OR y % 400 = 0 THEN 29 ELSE 28 END
             WHEN m IN (4, 6, 9, 11) THEN 30 ELSE 31 END,
        extract(dow FROM make_date(y, m, 1))::integer);
END $$;

-- Whether `spec` matches any day at all: some month it names, of some length and first
-- weekday (every combination comes back within 400 years), has a matching day. False for
-- '0 0 30 2 *', which croner searches for until it gives up.
CREATE FUNCTION jobq._cron_feasible(spec text[]) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    RETURN EXISTS (
        SELECT 1
          FROM (SELECT DISTINCT l.len
                  FROM (VALUES (1, 31), (2, 28), (2, 29), (3, 31), (4, 30), (5, 31), (6, 30), (7, 31),
                               (8, 31), (9, 30), (10, 31), (11, 30), (12, 31)) l(month, len)
                 WHERE substr(spec[5], l.month, 1) = '1') l,
               generate_series(0, 6) wd1
         WHERE strpos(jobq._cron_month(spec, l.len, wd1), '1') > 0);
END $$;

-- The first wall-clock time at or after `wall` (forward) or at or before it (backward) that
-- `spec` matches, or NULL when there is none croner would find: it searches up to year 5000
-- forward (a tick on 5000-01-01 only when the search enters that day from its start) and down
-- to year 1 backward (0001-12-31 only from its end). Jumps by month, day, then hour and minute
-- within the day, never by second.
CREATE FUNCTION jobq._cron_wall(spec text[], wall timestamp, forward boolean) RETURNS timestamp
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_secs    text := spec[1];
    v_mins    text := spec[2];
    v_hours   text := spec[3];
    v_months  text := spec[5];
    v_y       integer;
    v_m       integer;
    v_d       integer;
    v_tod     integer;   -- the second of the day
    v_h       integer;
    v_mi      integer;
    v_s       integer;
    v_t       integer;
    v_k       integer;
    v_days    text;      -- jobq._cron_days of (v_days_y, v_days_m)
    v_days_y  integer;
    v_days_m  integer;
    v_looked  integer := 0;   -- months looked at
BEGIN
    IF strpos(v_secs, '1') = 0 OR strpos(v_mins, '1') = 0 OR strpos(v_hours, '1') = 0
       OR strpos(v_months, '1') = 0 THEN
        RETURN NULL;
    END IF;
    IF forward AND wall < timestamp '0001-01-01' THEN
        wall := timestamp '0001-01-01';
    ELSIF NOT forward AND wall > timestamp '5000-12-31 23:59:59' THEN
        wall := timestamp '5000-12-31 23:59:59';
    END IF;
    v_y := extract(year FROM wall)::integer;
    v_m := extract(month FROM wall)::integer;
    v_d := extract(day FROM wall)::integer;
    v_tod := extract(epoch FROM wall::time)::integer;
    LOOP
        -- croner's limits
        IF forward AND (v_y > 5000 OR (v_y = 5000 AND (v_m > 1 OR v_d > 1 OR wall > timestamp '5000-01-01'))) THEN
            RETURN NULL;
        ELSIF NOT forward AND (v_y < 1 OR (v_y = 1 AND (v_m < 12 OR v_d < 31 OR wall < timestamp '0001-12-31 23:59:59'))) THEN
            RETURN NULL;
        END IF;
        -- A month the expression does not name: on to the next (previous) one it names.
        IF substr(v_months, v_m, 1) <> '1' THEN
            IF forward THEN
                v_k := strpos(substr(v_months, v_m + 1), '1');
                IF v_k > 0 THEN
                    v_m := v_m + v_k;
                ELSE
                    v_y := v_y + 1;
                    v_m := strpos(v_months, '1');
                END IF;
                v_d := 1;
                v_tod := 0;
            ELSE
                v_k := strpos(reverse(substr(v_months, 1, v_m - 1)), '1');
                IF v_k > 0 THEN
                    v_m := v_m - v_k;
                ELSE
                    v_y := v_y - 1;
                    v_m := 13 - strpos(reverse(v_months), '1');
                END IF;
                v_d := 31;
                v_tod := 86399;
            END IF;
            CONTINUE;
        END IF;
        -- The matching days of this month; past two years of months with none, whether there
        -- can be any.
        IF v_days_y IS DISTINCT FROM v_y OR v_days_m IS DISTINCT FROM v_m THEN
            v_days := jobq._cron_days(spec, v_y, v_m);
            v_days_y := v_y;
            v_days_m := v_m;
            v_looked := v_looked + 1;
            IF v_looked = 24 AND NOT jobq._cron_feasible(spec) THEN
                RETURN NULL;
            END IF;
        END IF;
        -- The first (last) matching day from v_d on (back); none: the next (previous) month.
        IF forward THEN
            v_k := strpos(substr(v_days, v_d), '1');
            IF v_k = 0 THEN
                IF v_m = 12 THEN v_y := v_y + 1; v_m := 1; ELSE v_m := v_m + 1; END IF;
                v_d := 1;
                v_tod := 0;
                CONTINUE;
            ELSIF v_k > 1 THEN
                v_d := v_d + v_k - 1;
                v_tod := 0;
            END IF;
        ELSE
            v_d := least(v_d, length(v_days));
            v_k := strpos(reverse(substr(v_days, 1, v_d)), '1');
            IF v_k = 0 THEN
                IF v_m = 1 THEN v_y := v_y - 1; v_m := 12; ELSE v_m := v_m - 1; END IF;
                v_d := 31;
                v_tod := 86399;
                CONTINUE;
            ELSIF v_k > 1 THEN
                v_d := v_d - v_k + 1;
                v_tod := 86399;
            END IF;
        END IF;
        -- The first (last) matching time of that day from v_tod on (back): the same hour and
        -- minute, else a later (earlier) minute of the hour, else a later (earlier) hour.
        v_h := v_tod / 3600;
        v_mi := v_tod / 60 % 60;
        v_s := v_tod % 60;
        v_t := NULL;
        IF forward THEN
            IF substr(v_hours, v_h + 1, 1) = '1' THEN
                IF substr(v_mins, v_mi + 1, 1) = '1' THEN
                    v_k := strpos(substr(v_secs, v_s + 1), '1');
                    IF v_k > 0 THEN v_t := v_tod + v_k - 1; END IF;
                END IF;
                IF v_t IS NULL THEN
                    v_k := strpos(substr(v_mins, v_mi + 2), '1');
                    IF v_k > 0 THEN v_t := v_h * 3600 + (v_mi + v_k) * 60 + strpos(v_secs, '1') - 1; END IF;
                END IF;
            END IF;
            IF v_t IS NULL THEN
                v_k := strpos(substr(v_hours, v_h + 2), '1');
                IF v_k > 0 THEN
                    v_t := (v_h + v_k) * 3600 + (strpos(v_mins, '1') - 1) * 60 + strpos(v_secs, '1') - 1;
                END IF;
            END IF;
            IF v_t IS NULL THEN   -- none left this day
                v_d := v_d + 1;
                v_tod := 0;
                CONTINUE;
            END IF;
        ELSE
            IF substr(v_hours, v_h + 1, 1) = '1' THEN
                IF substr(v_mins, v_mi + 1, 1) = '1' THEN
                    v_k := strpos(reverse(substr(v_secs, 1, v_s + 1)), '1');
                    IF v_k > 0 THEN v_t := v_tod - v_k + 1; END IF;
                END IF;
                IF v_t IS NULL THEN
                    v_k := strpos(reverse(substr(v_mins, 1, v_mi)), '1');
                    IF v_k > 0 THEN v_t := v_h * 3600 + (v_mi - v_k) * 60 + 60 - strpos(reverse(v_secs), '1'); END IF;
                END IF;
            END IF;
            IF v_t IS NULL THEN
                v_k := strpos(reverse(substr(v_hours, 1, v_h)), '1');
                IF v_k > 0 THEN
                    v_t := (v_h - v_k) * 3600 + (60 - strpos(reverse(v_mins), '1')) * 60 + 60 - strpos(reverse(v_secs), '1');
                END IF;
            END IF;
            IF v_t IS NULL THEN   -- none left this day
                v_d := v_d - 1;
                v_tod := 86399;
                CONTINUE;
            END IF;
        END IF;
        RETURN make_timestamp(v_y, v_m, v_d, 0, 0, 0) + make_interval(secs => v_t);
    END LOOP;
END $$;

-- The UTC offset of zone `zone` at instant `t`, in seconds.
CREATE FUNCTION jobq._cron_offset(zone text, t timestamptz) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
BEGIN
    RETURN extract(epoch FROM (t AT TIME ZONE zone) - (t AT TIME ZONE 'UTC'))::integer;
END $$;

-- The first instant in (lo, hi] whose offset in `zone` is not lo's: the zone's change of clock
-- between two whole-second instants (tzdata changes clocks on whole seconds), by bisection.
CREATE FUNCTION jobq._cron_transition(zone text, lo timestamptz, hi timestamptz) RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_offset  integer := jobq._cron_offset(zone, lo);
    v_lo      bigint := extract(epoch FROM lo)::bigint;
    v_hi      bigint := extract(epoch FROM hi)::bigint;
    v_mid     bigint;
BEGIN
    WHILE v_hi - v_lo > 1 LOOP
        v_mid := (v_lo + v_hi) / 2;
        IF jobq._cron_offset(zone, to_timestamp(v_mid)) = v_offset THEN
            v_lo := v_mid;
        ELSE
            v_hi := v_mid;
        END IF;
    END LOOP;
    RETURN to_timestamp(v_hi);
END $$;

-- The instants of wall-clock time `wall` (whole seconds) in `zone`: kind 1, one (first); kind
-- 2, a time the fall-back repeats: two (first, second); kind 0, a time the spring-forward
-- skips: none, and first is the first instant after the gap. The offsets in force a day
-- either side are the candidates (no zone changes its clock twice in a day).
CREATE FUNCTION jobq._cron_resolve(zone text, wall timestamp,
    OUT kind integer, OUT first timestamptz, OUT second timestamptz)
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_utc      timestamptz := wall AT TIME ZONE 'UTC';
    v_guess    timestamptz := wall AT TIME ZONE zone;
    v_offsets  integer[];
    v_found    timestamptz[];
BEGIN
    v_offsets := ARRAY[jobq._cron_offset(zone, v_guess - interval '1 day'), jobq._cron_offset(zone, v_guess),
                       jobq._cron_offset(zone, v_guess + interval '1 day')];
    IF v_offsets[1] = v_offsets[2] AND v_offsets[2] = v_offsets[3] THEN
        kind := 1;
        first := v_guess;
        RETURN;
    END IF;
    -- The candidates that hold: wall - offset has that offset.
    v_found := ARRAY(SELECT DISTINCT v_utc - make_interval(secs => o) AS i FROM unnest(v_offsets) o
                      WHERE jobq._cron_offset(zone, v_utc - make_interval(secs => o)) = o ORDER BY i);
    kind := cardinality(v_found);
    IF kind = 0 THEN
        first := jobq._cron_transition(zone, v_utc - make_interval(secs => (SELECT max(o) FROM unnest(v_offsets) o)),
                                             v_utc - make_interval(secs => (SELECT min(o) FROM unnest(v_offsets) o)));
    ELSE
        first := v_found[1];
        second := v_found[2];
    END IF;
END $$;

-- The first tick of `spec` in `zone` after `at` (forward), or the latest at or before it, or
-- NULL when croner finds none. Walks the matching wall-clock times from `at`'s own and turns
-- each into its tick (the rules at the top of this file); in the second pass of a repeated
-- range every wall-clock time of the range had its tick in the first pass, so the walk starts
-- at the range's end.
CREATE FUNCTION jobq._cron_tick(spec text[], zone text, at timestamptz, forward boolean) RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_at    timestamptz := to_timestamp(floor(extract(epoch FROM at)));   -- the whole second
    v_wall  timestamp := v_at AT TIME ZONE zone;
    v_after timestamp;   -- the wall-clock time a gap ends at
    r       record;
BEGIN
    r := jobq._cron_resolve(zone, v_wall);
    IF r.kind = 2 AND v_at = r.second THEN
        v_wall := ((jobq._cron_transition(zone, r.first, r.second) - interval '1 second') AT TIME ZONE zone)
                  + interval '1 second';
        IF NOT forward THEN
            v_wall := v_wall - interval '1 second';
        END IF;
    ELSIF forward THEN
        v_wall := v_wall + interval '1 second';
    END IF;
    LOOP
        v_wall := jobq._cron_wall(spec, v_wall, forward);
        IF v_wall IS NULL THEN
            RETURN NULL;
        END IF;
        r := jobq._cron_resolve(zone, v_wall);
        IF r.kind > 0 THEN
            RETURN r.first;   -- the time, or the first of a repeated one
        END IF;
        -- In a gap. A schedule of fixed times ticks as the gap ends, if that day matches
        -- (croner looks for the gap's end up to two hours on).
        v_after := r.first AT TIME ZONE zone;
        IF substr(spec[10], 6, 1) = '1' THEN
            IF v_after - v_wall > interval '2 hours' THEN
                RETURN NULL;
            END IF;
            IF extract(year FROM v_after) BETWEEN 1 AND 5000
               AND substr(spec[5], extract(month FROM v_after)::integer, 1) = '1'
               AND substr(jobq._cron_days(spec, extract(year FROM v_after)::integer, extract(month FROM v_after)::integer),
                          extract(day FROM v_after)::integer, 1) = '1' THEN
                RETURN r.first;
            END IF;
        END IF;
        -- No tick in the gap: on past it.
        v_wall := CASE WHEN forward THEN v_after ELSE (r.first - interval '1 second') AT TIME ZONE zone END;
    END LOOP;
END $$;

-- The first tick of `cron` in `time_zone` strictly after `after`. Raises 22023 for an
-- invalid expression or zone, or one with no tick after `after` (jobq_schedule's validation,
-- with `after` = now).
CREATE FUNCTION jobq._cron_next(cron text, time_zone text, after timestamptz) RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_spec  text[] := jobq._cron_parse(cron);
    v_zone  text := jobq._cron_zone(time_zone);
    v_tick  timestamptz;
BEGIN
    IF v_zone IS NULL THEN
        RAISE EXCEPTION 'jobq: unknown time zone "%" (use an IANA name such as Europe/Paris or UTC)', time_zone
            USING ERRCODE = '22023';
    ELSIF NOT isfinite(after) THEN
        RAISE EXCEPTION 'jobq: after must be a finite time' USING ERRCODE = '22023';
    END IF;
    v_tick := jobq._cron_tick(v_spec, v_zone, after, true);
    IF v_tick IS NULL THEN
        RAISE EXCEPTION 'jobq: cron expression "%" never comes due after % (CronScheduler time search limit exceeded.)', cron, after
            USING ERRCODE = '22023';
    END IF;
    RETURN v_tick;
END $$;

-- The latest tick of `cron` in `time_zone` at or before `upto`.
CREATE FUNCTION jobq._cron_latest(cron text, time_zone text, upto timestamptz) RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, jobq, pg_temp AS $$
DECLARE
    v_spec  text[] := jobq._cron_parse(cron);
    v_zone  text := jobq._cron_zone(time_zone);
    v_tick  timestamptz;
BEGIN
    IF v_zone IS NULL THEN
        RAISE EXCEPTION 'jobq: unknown time zone "%" (use an IANA name such as Europe/Paris or UTC)', time_zone
            USING ERRCODE = '22023';
    ELSIF NOT isfinite(upto) THEN
        RAISE EXCEPTION 'jobq: upto must be a finite time' USING ERRCODE = '22023';
    END IF;
    v_tick := jobq._cron_tick(v_spec, v_zone, upto, false);
    IF v_tick IS NULL THEN
        RAISE EXCEPTION 'jobq: no tick of "%" before %: CronScheduler time search limit exceeded.', cron, upto
            USING ERRCODE = '22023';
    END IF;
    RETURN v_tick;
END $$;
