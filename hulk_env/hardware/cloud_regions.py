"""Cloud regions with GPUs, by provider and code, each mapped to its metro's coordinates.

A cluster file may name a machine's region as ``aws:us-west-2``, ``gcp:europe-west4`` or
``azure:eastus`` (any case), or as the bare code when only one provider uses it (``us-west-2``
is AWS's, ``us-west2`` GCP's, ``eastus`` Azure's). The table holds, per provider, the regions
that offer GPU instances (AWS G4dn/G5/P4/P5, GCP T4/L4/A100/H100, Azure NC/ND/NV series) in
the providers' regional listings; a region outside it can still be used as a city or with
``lat``/``lon``.

Coordinates are the metro of the region's data centres as the provider documents it (AWS and
GCP name a city or state, Azure publishes coordinates per region); metros already in
:data:`hulk_env.hardware.geo.CITIES` are taken from there, the others are listed in
:data:`METROS` below. A metro is good to a few tens of km (well under 1 ms of modelled RTT),
which is all the distance model needs.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import NamedTuple

from hulk_env.errors import HulkInputError
from hulk_env.hardware import geo

PROVIDERS = ("aws", "gcp", "azure")


@dataclass(frozen=True)
class CloudRegion:
    """One provider region.

    Attributes:
        provider: ``"aws"``, ``"gcp"`` or ``"azure"``.
        code: the provider's region code (``"us-west-2"``).
        label: the provider's display name (``"US West (Oregon)"``).
        metro: the city its data centres are in or near.
        lat: latitude of the metro in degrees.
        lon: longitude of the metro in degrees.
        country: country of the metro.
        continent: continent of the metro.
    """

    provider: str
    code: str
    label: str
    metro: str
    lat: float
    lon: float
    country: str
    continent: str

    @property
    def qualified(self) -> str:
        """``provider:code``, the unambiguous spelling."""
        return f"{self.provider}:{self.code}"


_NA, _SA, _EU, _AS, _AF, _OC = (
    "North America", "South America", "Europe", "Asia", "Africa", "Oceania",
)  # fmt: skip

# Data-centre metros not in the city table (name -> lat, lon, country, continent).
METROS: dict[str, geo.City] = {
    c.name: c
    for c in (
        geo.City("Moncks Corner", 33.1960, -80.0131, "United States", _NA),  # gcp us-east1
        geo.City("The Dalles", 45.5946, -121.1787, "United States", _NA),  # gcp us-west1
        geo.City("Salt Lake City", 40.7608, -111.8910, "United States", _NA),
        geo.City("Las Vegas", 36.1699, -115.1398, "United States", _NA),
        geo.City("Boydton", 36.6676, -78.3875, "United States", _NA),  # azure eastus2
        geo.City("Richmond", 37.5407, -77.4360, "United States", _NA),  # azure eastus
        geo.City("Des Moines", 41.5868, -93.6250, "United States", _NA),  # azure centralus
        geo.City("San Antonio", 29.4241, -98.4936, "United States", _NA),
        geo.City("Quincy", 47.2343, -119.8526, "United States", _NA),  # azure westus2
        geo.City("San Francisco", 37.7749, -122.4194, "United States", _NA),  # azure westus
        geo.City("St. Ghislain", 50.4490, 3.8186, "Belgium", _EU),  # gcp europe-west1
        geo.City("Eemshaven", 53.4386, 6.8336, "Netherlands", _EU),  # gcp europe-west4
        geo.City("Gavle", 60.6749, 17.1413, "Sweden", _EU),  # azure swedencentral
        geo.City("Changhua", 24.0518, 120.5161, "Taiwan", _AS),  # gcp asia-east1
        geo.City("Pune", 18.5204, 73.8567, "India", _AS),  # azure centralindia
        geo.City("Chennai", 13.0827, 80.2707, "India", _AS),  # azure southindia
    )
}


def _metro(name: str) -> geo.City:
    city = METROS.get(name) or geo.find_city(name)
    if city is None:  # a table error, caught by the tests
        raise KeyError(f"metro {name!r} is neither in METROS nor in the city table")
    return city


# (provider, code, label, metro)
_TABLE: tuple[tuple[str, str, str, str], ...] = (
    # AWS: regions offering GPU instance families (G4dn and up).
    ("aws", "us-east-1", "US East (N. Virginia)", "Ashburn"),
    ("aws", "us-east-2", "US East (Ohio)", "Columbus"),
    ("aws", "us-west-1", "US West (N. California)", "San Jose"),
    ("aws", "us-west-2", "US West (Oregon)", "Boardman"),
    ("aws", "ca-central-1", "Canada (Central)", "Montreal"),
    ("aws", "sa-east-1", "South America (Sao Paulo)", "Sao Paulo"),
    ("aws", "eu-west-1", "Europe (Ireland)", "Dublin"),
    ("aws", "eu-west-2", "Europe (London)", "London"),
    ("aws", "eu-west-3", "Europe (Paris)", "Paris"),
    ("aws", "eu-central-1", "Europe (Frankfurt)", "Frankfurt"),
    ("aws", "eu-north-1", "Europe (Stockholm)", "Stockholm"),
    ("aws", "eu-south-1", "Europe (Milan)", "Milan"),
    ("aws", "me-south-1", "Middle East (Bahrain)", "Manama"),
    ("aws", "af-south-1", "Africa (Cape Town)", "Cape Town"),
    ("aws", "ap-east-1", "Asia Pacific (Hong Kong)", "Hong Kong"),
    ("aws", "ap-south-1", "Asia Pacific (Mumbai)", "Mumbai"),
    ("aws", "ap-northeast-1", "Asia Pacific (Tokyo)", "Tokyo"),
    ("aws", "ap-northeast-2", "Asia Pacific (Seoul)", "Seoul"),
    ("aws", "ap-northeast-3", "Asia Pacific (Osaka)", "Osaka"),
    ("aws", "ap-southeast-1", "Asia Pacific (Singapore)", "Singapore"),
    ("aws", "ap-southeast-2", "Asia Pacific (Sydney)", "Sydney"),
    ("aws", "ap-southeast-3", "Asia Pacific (Jakarta)", "Jakarta"),
    # GCP: regions with GPU zones.
    ("gcp", "us-central1", "Iowa", "Council Bluffs"),
    ("gcp", "us-east1", "South Carolina", "Moncks Corner"),
    ("gcp", "us-east4", "Northern Virginia", "Ashburn"),
    ("gcp", "us-east5", "Columbus", "Columbus"),
    ("gcp", "us-south1", "Dallas", "Dallas"),
    ("gcp", "us-west1", "Oregon", "The Dalles"),
    ("gcp", "us-west2", "Los Angeles", "Los Angeles"),
    ("gcp", "us-west3", "Salt Lake City", "Salt Lake City"),
    ("gcp", "us-west4", "Las Vegas", "Las Vegas"),
    ("gcp", "northamerica-northeast1", "Montreal", "Montreal"),
    ("gcp", "southamerica-east1", "Sao Paulo", "Sao Paulo"),
    ("gcp", "europe-west1", "Belgium", "St. Ghislain"),
    ("gcp", "europe-west2", "London", "London"),
    ("gcp", "europe-west3", "Frankfurt", "Frankfurt"),
    ("gcp", "europe-west4", "Netherlands", "Eemshaven"),
    ("gcp", "europe-west6", "Zurich", "Zurich"),
    ("gcp", "europe-central2", "Warsaw", "Warsaw"),
    ("gcp", "asia-east1", "Taiwan", "Changhua"),
    ("gcp", "asia-east2", "Hong Kong", "Hong Kong"),
    ("gcp", "asia-northeast1", "Tokyo", "Tokyo"),
    ("gcp", "asia-northeast3", "Seoul", "Seoul"),
    ("gcp", "asia-south1", "Mumbai", "Mumbai"),
    ("gcp", "asia-southeast1", "Singapore", "Singapore"),
    ("gcp", "asia-southeast2", "Jakarta", "Jakarta"),
    ("gcp", "australia-southeast1", "Sydney", "Sydney"),
    ("gcp", "me-west1", "Tel Aviv", "Tel Aviv"),
    # Azure: regions offering N-series (NC/ND/NV) virtual machines.
    ("azure", "eastus", "East US", "Richmond"),
    ("azure", "eastus2", "East US 2", "Boydton"),
    ("azure", "centralus", "Central US", "Des Moines"),
    ("azure", "northcentralus", "North Central US", "Chicago"),
    ("azure", "southcentralus", "South Central US", "San Antonio"),
    ("azure", "westus", "West US", "San Francisco"),
    ("azure", "westus2", "West US 2", "Quincy"),
    ("azure", "westus3", "West US 3", "Phoenix"),
    ("azure", "canadacentral", "Canada Central", "Toronto"),
    ("azure", "brazilsouth", "Brazil South", "Sao Paulo"),
    ("azure", "northeurope", "North Europe", "Dublin"),
    ("azure", "westeurope", "West Europe", "Amsterdam"),
    ("azure", "uksouth", "UK South", "London"),
    ("azure", "francecentral", "France Central", "Paris"),
    ("azure", "germanywestcentral", "Germany West Central", "Frankfurt"),
    ("azure", "switzerlandnorth", "Switzerland North", "Zurich"),
    ("azure", "norwayeast", "Norway East", "Oslo"),
    ("azure", "swedencentral", "Sweden Central", "Gavle"),
    ("azure", "uaenorth", "UAE North", "Dubai"),
    ("azure", "southafricanorth", "South Africa North", "Johannesburg"),
    ("azure", "eastasia", "East Asia", "Hong Kong"),
    ("azure", "southeastasia", "Southeast Asia", "Singapore"),
    ("azure", "japaneast", "Japan East", "Tokyo"),
    ("azure", "koreacentral", "Korea Central", "Seoul"),
    ("azure", "centralindia", "Central India", "Pune"),
    ("azure", "southindia", "South India", "Chennai"),
    ("azure", "australiaeast", "Australia East", "Sydney"),
)


def _build(provider: str, code: str, label: str, metro: str) -> CloudRegion:
    city = _metro(metro)
    return CloudRegion(provider, code, label, city.name, city.lat, city.lon, city.country, city.continent)


REGIONS: dict[str, CloudRegion] = {r.qualified: r for r in (_build(*row) for row in _TABLE)}

# Bare code -> the regions using it (more than one = ambiguous without a provider).
_BY_CODE: dict[str, list[CloudRegion]] = {}
for _r in REGIONS.values():
    _BY_CODE.setdefault(_r.code, []).append(_r)


def regions(provider: str | None = None) -> tuple[CloudRegion, ...]:
    """The table, or one provider's part of it."""
    return tuple(r for r in REGIONS.values() if provider is None or r.provider == provider)


def looks_like_region(name: str) -> bool:
    """True if ``name`` is spelled ``provider:code`` with a known provider."""
    provider, sep, _ = str(name).strip().lower().partition(":")
    return bool(sep) and provider in PROVIDERS


def find_region(name: str) -> CloudRegion | None:
    """The region ``provider:code`` or an unambiguous bare code (any case), else None."""
    text = str(name).strip().lower()
    if text in REGIONS:
        return REGIONS[text]
    matches = _BY_CODE.get(text, [])
    return matches[0] if len(matches) == 1 else None


def get_region(name: str) -> CloudRegion:
    """The region called ``name``.

    Raises:
        HulkInputError: unknown provider, unknown code (close codes suggested), or a bare code
            more than one provider uses (the qualified spellings listed).
    """
    region = find_region(name)
    if region is not None:
        return region
    text = str(name).strip().lower()
    provider, sep, code = text.partition(":")
    if sep and provider not in PROVIDERS:
        raise HulkInputError(
            f"unknown cloud provider {provider!r} in {name!r}; providers: {', '.join(PROVIDERS)}",
            field="region",
        )
    if not sep and len(_BY_CODE.get(text, [])) > 1:
        options = " or ".join(r.qualified for r in _BY_CODE[text])
        raise HulkInputError(f"region {name!r} is ambiguous; write {options}", field="region")
    pool = [r.code for r in regions(provider)] if sep else list(_BY_CODE)
    close = difflib.get_close_matches(code if sep else text, pool, n=3, cutoff=0.6)
    where = f"{provider} " if sep else ""
    hint = f"did you mean {', '.join(close)}?" if close else "see hulk_env.hardware.cloud_regions"
    raise HulkInputError(
        f"unknown {where}region {name!r} (the table lists regions with GPUs); {hint} "
        "(or give a city, or lat and lon)",
        field="region",
    )


# ---- sites: what a cluster file's ``region`` names -----------------------------------------------


class Site(NamedTuple):
    """Where a ``region`` label puts its machines.

    Attributes:
        label: the label as the user wrote it (trimmed): printed everywhere, never renamed.
        lat: latitude in degrees.
        lon: longitude in degrees.
        place: what it was resolved to (``"aws:us-west-2, Boardman"``, ``"Boardman"``).
    """

    label: str
    lat: float
    lon: float
    place: str


def find_site(name: str) -> Site | None:
    """A cloud region (``provider:code`` or a bare code) or a city of the table, else None."""
    label = str(name).strip()
    region = find_region(label)
    if region is not None:
        return Site(label, region.lat, region.lon, f"{region.qualified}, {region.metro}")
    city = geo.find_city(label)
    return None if city is None else Site(label, city.lat, city.lon, city.name)


def regions_near(name: str) -> list[CloudRegion]:
    """Cloud regions whose country (or a close spelling of one), metro or display name is
    ``name`` (``"Ireland"``, ``"Oregon"``)."""
    key = str(name).strip().lower()
    if len(key) < 3:
        return []
    countries = sorted({r.country.lower() for r in REGIONS.values()})
    key = next(iter(difflib.get_close_matches(key, countries, n=1, cutoff=0.8)), key)  # "Irland"
    words = lambda text: {w.strip("()., ") for w in text.lower().split()}  # noqa: E731
    return [
        r for r in REGIONS.values()
        if key in (r.country.lower(), r.metro.lower()) or key in words(r.label)
    ]  # fmt: skip


def get_site(name: str) -> Site:
    """The site called ``name``.

    Raises:
        HulkInputError: an unknown cloud region (close codes suggested), or a name that is
            neither a city nor a region (cloud regions in that country or place suggested,
            else close city names).
    """
    site = find_site(name)
    if site is not None:
        return site
    if ":" in str(name) or str(name).strip().lower() in _BY_CODE:
        get_region(name)  # raises: an unknown provider, or the provider's close codes
    near = regions_near(name)
    if near:
        shown = ", ".join(f"{r.qualified} ({r.metro})" for r in near[:6])
        raise HulkInputError(
            f"unknown city or region {str(name).strip()!r}; cloud regions there: {shown} "
            "(or a city, or lat and lon)",
            field="region",
        )
    geo.get_city(name)  # raises with close city names
    raise AssertionError("unreachable")  # pragma: no cover
