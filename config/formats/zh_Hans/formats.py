"""Simplified Chinese formats with seconds, as the English ones (config/formats/en): Django's own
show "2026年12月1日 11:13", without seconds or the time zone."""

DATE_FORMAT = "Y年n月j日"
TIME_FORMAT = "H:i:s"
DATETIME_FORMAT = "Y年n月j日 H:i:s T"
YEAR_MONTH_FORMAT = "Y年n月"
MONTH_DAY_FORMAT = "n月j日"
SHORT_DATE_FORMAT = "Y-m-d"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s"
FIRST_DAY_OF_WEEK = 1  # Monday
DECIMAL_SEPARATOR = "."
THOUSAND_SEPARATOR = ","
NUMBER_GROUPING = 3
