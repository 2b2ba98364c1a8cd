"""Which continent each country is on (ISO 3166-1 alpha-2 -> the GeoIP continent codes AF AN
AS EU NA OC SA), as MaxMind's GeoIP2 and GeoLite2 databases assign them (Timor-Leste:
Oceania, as GeoNames has it). Data only: residency matching (``policies.matching``) derives a
client's continent from its country with it, the validator accepts exactly its codes, and the
lint tells with it which declared jurisdictions a ``clients continent`` rule reaches.
``tests/engine/test_geoip_walk.py`` checks it against every record of the bundled databases.
"""

from __future__ import annotations

_BY_CONTINENT = {
    "AF": "AO BF BI BJ BW CD CF CG CI CM CV DJ DZ EG EH ER ET GA GH GM GN GQ GW KE KM LR LS "
          "LY MA MG ML MR MU MW MZ NA NE NG RE RW SC SD SH SL SN SO SS ST SZ TD TG TN TZ UG "
          "YT ZA ZM ZW",
    "AN": "AQ BV GS HM TF",
    "AS": "AE AF AM AZ BD BH BN BT CC CN CX GE HK ID IL IN IO IQ IR JO JP KG KH KP KR KW KZ "
          "LA LB LK MM MN MO MV MY NP OM PH PK PS QA SA SG SY TH TJ TM TR TW UZ VN YE",
    "EU": "AD AL AT AX BA BE BG BY CH CY CZ DE DK EE ES FI FO FR GB GG GI GR HR HU IE IM IS "
          "IT JE LI LT LU LV MC MD ME MK MT NL NO PL PT RO RS RU SE SI SJ SK SM UA VA XK",
    "NA": "AG AI AW BB BL BM BQ BS BZ CA CR CU CW DM DO GD GL GP GT HN HT JM KN KY LC MF MQ "
          "MS MX NI PA PM PR SV SX TC TT US VC VG VI",
    "OC": "AS AU CK FJ FM GU KI MH MP NC NF NR NU NZ PF PG PN PW SB TK TL TO TV UM VU WF WS",
    "SA": "AR BO BR CL CO EC FK GF GY PE PY SR UY VE",
}

CONTINENT_OF: dict[str, str] = {
    country: continent
    for continent, countries in _BY_CONTINENT.items()
    for country in countries.split()
}

# Continents on which the bundled GeoIP databases place some networks with no country
# (anycast and multi-country blocks): GeoLite2 City 2018-07-03 (``maxminddb-geolite2``) and
# MaxMind's test databases. The lint warns about rules naming countries on them.
CONTINENT_ONLY_RECORDS = frozenset({"AS", "EU"})
