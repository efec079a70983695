"""Geography: a city table and the link models that turn distance into latency and bandwidth.

Models (constants below, each with its source or reasoning):

* great-circle distance on a sphere of the Earth's mean radius (haversine);
* round-trip time ``RTT = RTT_FLOOR_MS + ROUTE_FACTOR x km / 100`` ms: light in fibre covers
  about 200 km per ms, so a straight fibre costs 1 ms of RTT per 100 km; real routes are
  longer than the great circle and cross routers, hence the route factor and the floor;
* the physical lower bound ``2 km / FIBRE_KM_PER_MS`` (a straight fibre, no equipment): a
  measured RTT below it is impossible and marks a bad measurement;
* WAN bandwidth of one TCP flow ``min(1.05, 77 / rtt_ms)`` Gbps, fitted on published AWS
  inter-region measurements (throughput is window-limited, so it falls as 1 / RTT);
* machines in the same region share a LAN: ``LAN_RTT_MS`` and ``LAN_BANDWIDTH_GBPS``. Inside one
  machine nothing is needed: :class:`hulk_env.cluster.Cluster` sets its diagonal to latency 0
  and infinite bandwidth.

Inside the code everything is SI (seconds, bytes/s); the functions named ``*_ms``/``*_gbps``
speak the units people quote and :func:`link_matrices` converts.
"""

from __future__ import annotations

import difflib
import unicodedata
from dataclasses import dataclass

import numpy as np

from hulk_env.errors import HulkInputError
from hulk_env.units import gbps_to_bytes_per_s, ms_to_s

EARTH_RADIUS_KM = 6371.0088  # IUGG mean Earth radius
FIBRE_KM_PER_MS = 200.0  # light in silica fibre: c / 1.47 ~ 204 km per ms, rounded down
RTT_MS_PER_KM = 2.0 / FIBRE_KM_PER_MS  # straight-fibre round trip: 1 ms per 100 km
# Fibre route length / great-circle distance, router hops included. Cloud inter-region pings
# need about 1.3 (direct submarine cables) to 1.9 (short terrestrial hops); 1.6 is the middle:
# it models Virginia-Oregon at 58 ms, London-Frankfurt 12 ms, Frankfurt-Mumbai 107 ms.
ROUTE_FACTOR = 1.6
RTT_FLOOR_MS = 2.0  # switching, serialisation and access links of a WAN path, any distance
WAN_BANDWIDTH_CAP_GBPS = 1.05  # single-flow plateau of the AWS inter-region fit
WAN_BANDWIDTH_RTT_PRODUCT = 77.0  # Gbps x ms: window-limited throughput ~ 77 / rtt_ms Gbps
LAN_RTT_MS = 0.5  # two servers of one data centre / city LAN
LAN_BANDWIDTH_GBPS = 10.0  # 10 GbE, the common data-centre server uplink


@dataclass(frozen=True)
class City:
    """A city (or cloud region site) with coordinates in degrees."""

    name: str
    lat: float
    lon: float
    country: str
    continent: str


def _c(name: str, lat: float, lon: float, country: str, continent: str) -> City:
    return City(name, lat, lon, country, continent)


# The Hulk paper's 12 cities first (spelled as in its node_feature.csv), then cities hosting
# major cloud regions (AWS, Azure, GCP, Alibaba, Tencent), on every continent.
_CITIES: tuple[City, ...] = (
    _c("Beijing", 39.9042, 116.4074, "China", "Asia"),
    _c("Neimeng", 40.8426, 111.7492, "China", "Asia"),  # Hohhot, Inner Mongolia
    _c("Nanjing", 32.0603, 118.7969, "China", "Asia"),
    _c("Quanzhou", 24.8741, 118.6757, "China", "Asia"),
    _c("California", 37.3382, -121.8863, "United States", "North America"),  # San Jose
    _c("Tokyo", 35.6762, 139.6503, "Japan", "Asia"),
    _c("Berlin", 52.5200, 13.4050, "Germany", "Europe"),
    _c("London", 51.5074, -0.1278, "United Kingdom", "Europe"),
    _c("New Delhi", 28.6139, 77.2090, "India", "Asia"),
    _c("Paris", 48.8566, 2.3522, "France", "Europe"),
    _c("Rome", 41.9028, 12.4964, "Italy", "Europe"),
    _c("Brasilia", -15.7939, -47.8828, "Brazil", "South America"),
    # North America
    _c("Ashburn", 39.0438, -77.4874, "United States", "North America"),  # N. Virginia
    _c("Columbus", 39.9612, -82.9988, "United States", "North America"),  # Ohio
    _c("Boardman", 45.8399, -119.7006, "United States", "North America"),  # Oregon
    _c("Council Bluffs", 41.2619, -95.8608, "United States", "North America"),  # Iowa
    _c("Dallas", 32.7767, -96.7970, "United States", "North America"),
    _c("Los Angeles", 34.0522, -118.2437, "United States", "North America"),
    _c("Seattle", 47.6062, -122.3321, "United States", "North America"),
    _c("Chicago", 41.8781, -87.6298, "United States", "North America"),
    _c("Phoenix", 33.4484, -112.0740, "United States", "North America"),
    _c("Montreal", 45.5017, -73.5673, "Canada", "North America"),
    _c("Toronto", 43.6532, -79.3832, "Canada", "North America"),
    _c("Queretaro", 20.5888, -100.3899, "Mexico", "North America"),
    # South America
    _c("Sao Paulo", -23.5505, -46.6333, "Brazil", "South America"),
    _c("Santiago", -33.4489, -70.6693, "Chile", "South America"),
    _c("Bogota", 4.7110, -74.0721, "Colombia", "South America"),
    _c("Buenos Aires", -34.6037, -58.3816, "Argentina", "South America"),
    # Europe
    _c("Frankfurt", 50.1109, 8.6821, "Germany", "Europe"),
    _c("Dublin", 53.3498, -6.2603, "Ireland", "Europe"),
    _c("Amsterdam", 52.3676, 4.9041, "Netherlands", "Europe"),
    _c("Stockholm", 59.3293, 18.0686, "Sweden", "Europe"),
    _c("Milan", 45.4642, 9.1900, "Italy", "Europe"),
    _c("Madrid", 40.4168, -3.7038, "Spain", "Europe"),
    _c("Zurich", 47.3769, 8.5417, "Switzerland", "Europe"),
    _c("Warsaw", 52.2297, 21.0122, "Poland", "Europe"),
    _c("Helsinki", 60.1699, 24.9384, "Finland", "Europe"),
    _c("Oslo", 59.9139, 10.7522, "Norway", "Europe"),
    _c("Marseille", 43.2965, 5.3698, "France", "Europe"),
    # Middle East and Africa
    _c("Manama", 26.2285, 50.5860, "Bahrain", "Asia"),
    _c("Dubai", 25.2048, 55.2708, "United Arab Emirates", "Asia"),
    _c("Tel Aviv", 32.0853, 34.7818, "Israel", "Asia"),
    _c("Doha", 25.2854, 51.5310, "Qatar", "Asia"),
    _c("Cape Town", -33.9249, 18.4241, "South Africa", "Africa"),
    _c("Johannesburg", -26.2041, 28.0473, "South Africa", "Africa"),
    _c("Lagos", 6.5244, 3.3792, "Nigeria", "Africa"),
    _c("Nairobi", -1.2921, 36.8219, "Kenya", "Africa"),
    _c("Cairo", 30.0444, 31.2357, "Egypt", "Africa"),
    # Asia
    _c("Singapore", 1.3521, 103.8198, "Singapore", "Asia"),
    _c("Hong Kong", 22.3193, 114.1694, "China", "Asia"),
    _c("Seoul", 37.5665, 126.9780, "South Korea", "Asia"),
    _c("Osaka", 34.6937, 135.5023, "Japan", "Asia"),
    _c("Mumbai", 19.0760, 72.8777, "India", "Asia"),
    _c("Hyderabad", 17.3850, 78.4867, "India", "Asia"),
    _c("Jakarta", -6.2088, 106.8456, "Indonesia", "Asia"),
    _c("Shanghai", 31.2304, 121.4737, "China", "Asia"),
    _c("Shenzhen", 22.5431, 114.0579, "China", "Asia"),
    _c("Hangzhou", 30.2741, 120.1551, "China", "Asia"),
    _c("Chengdu", 30.5728, 104.0668, "China", "Asia"),
    _c("Zhangjiakou", 40.8244, 114.8875, "China", "Asia"),
    _c("Taipei", 25.0330, 121.5654, "Taiwan", "Asia"),
    _c("Bangkok", 13.7563, 100.5018, "Thailand", "Asia"),
    _c("Kuala Lumpur", 3.1390, 101.6869, "Malaysia", "Asia"),
    # Oceania
    _c("Sydney", -33.8688, 151.2093, "Australia", "Oceania"),
    _c("Melbourne", -37.8136, 144.9631, "Australia", "Oceania"),
    _c("Perth", -31.9505, 115.8605, "Australia", "Oceania"),
    _c("Auckland", -36.8485, 174.7633, "New Zealand", "Oceania"),
)

CITIES: dict[str, City] = {c.name: c for c in _CITIES}
PAPER_CITIES: tuple[str, ...] = tuple(c.name for c in _CITIES[:12])

# Other spellings -> canonical name (keys are normalised by _key()).
_ALIASES = {
    "hohhot": "Neimeng",
    "huhehaote": "Neimeng",
    "inner mongolia": "Neimeng",
    "nei mongol": "Neimeng",
    "san jose": "California",
    "silicon valley": "California",
    "bay area": "California",
    "delhi": "New Delhi",
    "n virginia": "Ashburn",
    "northern virginia": "Ashburn",
    "virginia": "Ashburn",
    "ohio": "Columbus",
    "oregon": "Boardman",
    "iowa": "Council Bluffs",
    "bahrain": "Manama",
    "tel aviv yafo": "Tel Aviv",
}


def _key(name: str) -> str:
    """Case-, accent-, punctuation- and space-blind key: ``" São  Paulo"`` -> ``"sao paulo"``."""
    text = unicodedata.normalize("NFKD", str(name))
    text = "".join(ch for ch in text if not unicodedata.combining(ch))
    text = "".join(ch if ch.isalnum() else " " for ch in text.lower())
    return " ".join(text.split())


_BY_KEY: dict[str, City] = {_key(c.name): c for c in _CITIES} | {
    _key(k): CITIES[v] for k, v in _ALIASES.items()
}


def find_city(name: str) -> City | None:
    """The city called ``name`` (any case, spacing or accents; aliases allowed), or None."""
    return _BY_KEY.get(_key(name))


def get_city(name: str) -> City:
    """The city called ``name``.

    Raises:
        HulkInputError: unknown city; the message suggests close matches.
    """
    city = find_city(name)
    if city is not None:
        return city
    close = difflib.get_close_matches(_key(name), list(_BY_KEY), n=4, cutoff=0.6)
    names = list(dict.fromkeys(_BY_KEY[k].name for k in close))
    hint = (
        f"did you mean {', '.join(names)}?"
        if names
        else f"known: {', '.join(PAPER_CITIES)} and {len(CITIES) - len(PAPER_CITIES)} more "
        "in hulk_env.hardware.geo.CITIES"
    )
    raise HulkInputError(
        f"unknown city '{name}'; {hint} (or give lat/lon explicitly)", field="region"
    )


def great_circle_km(lat1, lon1, lat2, lon2) -> np.ndarray | float:
    """Great-circle distance in km between points in degrees (haversine; numpy broadcasts)."""
    p1, l1, p2, l2 = (np.radians(np.asarray(x, dtype=np.float64)) for x in (lat1, lon1, lat2, lon2))
    h = np.sin((p2 - p1) / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin((l2 - l1) / 2) ** 2
    km = 2 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(h, 0.0, 1.0)))
    return float(km) if km.ndim == 0 else km


def rtt_ms_from_km(km) -> np.ndarray | float:
    """Modelled WAN round-trip time in ms for a great-circle distance in km."""
    rtt = RTT_FLOOR_MS + ROUTE_FACTOR * RTT_MS_PER_KM * np.asarray(km, dtype=np.float64)
    return float(rtt) if rtt.ndim == 0 else rtt


def min_rtt_ms_physical(km) -> np.ndarray | float:
    """The fastest possible RTT in ms over ``km``: a straight fibre, no equipment."""
    rtt = RTT_MS_PER_KM * np.asarray(km, dtype=np.float64)
    return float(rtt) if rtt.ndim == 0 else rtt


def wan_bandwidth_gbps(rtt_ms) -> np.ndarray | float:
    """Single-flow WAN bandwidth in Gbps for a round-trip time in ms: ``min(1.05, 77 / rtt)``."""
    rtt = np.maximum(np.asarray(rtt_ms, dtype=np.float64), 1e-9)  # a 0 ms RTT hits the cap
    bw = np.minimum(WAN_BANDWIDTH_CAP_GBPS, WAN_BANDWIDTH_RTT_PRODUCT / rtt)
    return float(bw) if bw.ndim == 0 else bw


def modelled_rtt_ms(lats, lons, regions) -> np.ndarray:
    """``[M, M]`` modelled RTT in ms: LAN within a region, the distance model across regions.

    Args:
        lats: ``[M]`` latitudes in degrees.
        lons: ``[M]`` longitudes in degrees.
        regions: ``[M]`` region labels.
    """
    lat = np.asarray(lats, dtype=np.float64)
    lon = np.asarray(lons, dtype=np.float64)
    km = great_circle_km(lat[:, None], lon[:, None], lat[None, :], lon[None, :])
    rtt = np.where(same_region(regions), LAN_RTT_MS, rtt_ms_from_km(km))
    np.fill_diagonal(rtt, 0.0)
    return rtt


def same_region(regions) -> np.ndarray:
    """``[M, M]`` bool: True where two machines share a region label."""
    reg = np.asarray([str(r) for r in regions])
    return reg[:, None] == reg[None, :]


def links_from_rtt_ms(rtt_ms: np.ndarray, same: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One-way latency (RTT / 2, seconds) and bandwidth (bytes/s) from an RTT matrix in ms.

    Bandwidth is the LAN value where ``same`` (same region) and the WAN fit of the RTT
    elsewhere. The diagonal is latency 0 and infinite bandwidth.
    """
    rtt = np.asarray(rtt_ms, dtype=np.float64)
    latency_s = ms_to_s(rtt / 2)
    bandwidth_bps = gbps_to_bytes_per_s(np.where(same, LAN_BANDWIDTH_GBPS, wan_bandwidth_gbps(rtt)))
    np.fill_diagonal(latency_s, 0.0)
    np.fill_diagonal(bandwidth_bps, np.inf)
    return latency_s, bandwidth_bps


def link_matrices(lats, lons, regions) -> tuple[np.ndarray, np.ndarray]:
    """Modelled links between machines placed at coordinates, grouped by region.

    Pairs in the same region get the LAN values, other pairs the WAN model from their
    great-circle distance. The diagonal is latency 0 and infinite bandwidth.

    Args:
        lats: ``[M]`` latitudes in degrees.
        lons: ``[M]`` longitudes in degrees.
        regions: ``[M]`` region labels.

    Returns:
        ``(latency_s, bandwidth_bps)``: ``[M, M]`` one-way latency (RTT / 2) in seconds and
        bandwidth in bytes per second.
    """
    return links_from_rtt_ms(modelled_rtt_ms(lats, lons, regions), same_region(regions))
