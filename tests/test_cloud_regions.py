"""Cloud regions by provider name: lookup, ambiguity, metros, messages."""

from __future__ import annotations

import pytest

from hulk_env.errors import HulkInputError
from hulk_env.hardware import cloud_regions, geo


def test_every_provider_has_gpu_regions_on_several_continents():
    for provider in cloud_regions.PROVIDERS:
        table = cloud_regions.regions(provider)
        assert len(table) >= 20
        assert len({r.continent for r in table}) >= 5
    for region in cloud_regions.REGIONS.values():
        assert -90 <= region.lat <= 90 and -180 <= region.lon <= 180
        assert region.qualified == f"{region.provider}:{region.code}"


@pytest.mark.parametrize(
    ("name", "metro", "country"),
    [
        ("aws:us-west-2", "Boardman", "United States"),
        ("AWS:EU-WEST-1", "Dublin", "Ireland"),
        ("us-east-1", "Ashburn", "United States"),
        ("gcp:europe-west4", "Eemshaven", "Netherlands"),
        ("us-west2", "Los Angeles", "United States"),  # GCP's spelling, no hyphen before 2
        ("asia-northeast1", "Tokyo", "Japan"),
        ("azure:eastus", "Richmond", "United States"),
        ("westeurope", "Amsterdam", "Netherlands"),
        ("aws:us-west-1", "California", "United States"),  # the city table's San Jose
    ],
)
def test_lookup_by_qualified_or_bare_code(name, metro, country):
    region = cloud_regions.get_region(name)
    assert (region.metro, region.country) == (metro, country)


def test_metros_are_near_the_city_table():
    # A region whose metro is a city of the table takes that city's coordinates.
    frankfurt = geo.get_city("Frankfurt")
    for code in ("aws:eu-central-1", "gcp:europe-west3", "azure:germanywestcentral"):
        region = cloud_regions.get_region(code)
        assert (region.lat, region.lon) == (frankfurt.lat, frankfurt.lon)
    # Same-metro regions of different providers are a LAN apart, not an ocean.
    oregon = [cloud_regions.get_region(c) for c in ("aws:us-west-2", "gcp:us-west1")]
    km = geo.great_circle_km(oregon[0].lat, oregon[0].lon, oregon[1].lat, oregon[1].lon)
    assert km < 150


def test_no_bare_code_is_shared_today_but_ambiguity_is_reported(monkeypatch):
    assert all(len(v) == 1 for v in cloud_regions._BY_CODE.values())
    twin = cloud_regions.CloudRegion("gcp", "eu-west-1", "x", "Dublin", 53.3, -6.3, "Ireland", "Europe")
    monkeypatch.setitem(cloud_regions._BY_CODE, "eu-west-1", [cloud_regions.REGIONS["aws:eu-west-1"], twin])
    assert cloud_regions.find_region("eu-west-1") is None
    with pytest.raises(HulkInputError, match="ambiguous; write aws:eu-west-1 or gcp:eu-west-1"):
        cloud_regions.get_region("eu-west-1")
    assert cloud_regions.get_region("aws:eu-west-1").metro == "Dublin"


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("aws:us-west-9", ["unknown aws region", "did you mean us-west-2"]),
        ("ibm:us-south", ["unknown cloud provider 'ibm'", "aws, gcp, azure"]),
        ("europe-west44", ["unknown region", "europe-west4"]),
        ("gcp:mars-north1", ["unknown gcp region", "lat and lon"]),
    ],
)
def test_unknown_regions_are_one_clear_line(name, words):
    with pytest.raises(HulkInputError) as err:
        cloud_regions.get_region(name)
    message = str(err.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_looks_like_region():
    assert cloud_regions.looks_like_region("aws:us-west-2")
    assert cloud_regions.looks_like_region("GCP:anything")
    assert not cloud_regions.looks_like_region("Lab:7")
    assert not cloud_regions.looks_like_region("us-west-2")
