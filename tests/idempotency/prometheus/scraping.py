"""Read the text format as a scraper does: prometheus_client's own parser."""

from prometheus_client.parser import text_string_to_metric_families

METRICS_ON = {"METRICS": True}


def samples(text: str) -> dict:
    """``{(sample name, ((label, value), ...)): value}`` of a scrape."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(scraped: dict, name: str, **labels) -> float:
    """One sample's value; 0 when the scrape has none (a counter not yet
    counted has no sample)."""
    return scraped.get((name, tuple(sorted(labels.items()))), 0.0)


def scrape(client, path="/metrics") -> dict:
    answer = client.get(path)
    assert answer.status_code == 200, answer.content[:500]
    return samples(answer.content.decode())
