"""The inbox behind `inbox_search`: a few hundred synthetic emails and questions about them, made from a seed.

Every fact that a question asks about sits in an email on a line of its own, `Label: value` (for example
`Confirmation code: K7QX2P`), the way booking and billing emails are laid out. Some facts change later: a
flight is rescheduled, an invoice corrected, a meeting moved to another room. The follow-up email states the
fact again under the same label, so the answer to a question is the value in the *latest* email that states
it, and the question's `source_ids` are every email that states it (the reader needs the old one to know that
the new one replaces it). Promotions and newsletters mention the same cities, shops, vendors and projects
without stating any fact, so the top search result is not always the right email.

Generation uses only `random.Random(seed)` and a fixed "today" (`TODAY`), never the clock or set order, so a
seed always gives the same bytes. Regenerate the committed files with:

    python -m agentic_rl_lab.envs.inbox_data          # writes agentic_rl_lab/data/inbox/*.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

DEFAULT_DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "inbox"
"""Where the committed inbox lives: `agentic_rl_lab/data/inbox/`, package data, so a pip-installed wheel has it too."""
REGENERATE_COMMAND = "python -m agentic_rl_lab.envs.inbox_data"
TODAY = date(2025, 3, 14)
"""The inbox's "now", a Friday. Every email is older; the agent is told this date."""
OWNER = "Jordan Lee <jordan.lee@example.com>"
HOME_CITY = "London"


class Email(BaseModel):
    """One email. `date` is `YYYY-MM-DD HH:MM`, so sorting the strings sorts by time."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    date: str
    sender: str
    to: str
    subject: str
    body: str

    def as_text(self) -> str:
        """The email as `read_email` shows it: headers, a blank line, then the body."""
        headers = f"ID: {self.id}\nDate: {self.date}\nFrom: {self.sender}\nTo: {self.to}\nSubject: {self.subject}"
        return f"{headers}\n\n{self.body}"


class Question(BaseModel):
    """A question about the inbox with its ground truth. `kind` names the template (see QUESTION_TEMPLATES)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    kind: str
    question: str
    answer: str
    """Short and canonical, exactly as the latest source email writes it: `K7QX2P`, `2025-03-02`, `$1,234.50`."""
    aliases: list[str]
    """Other accepted spellings, like `9:15 am` for `09:15` or `March 2` for `2025-03-02`."""
    source_ids: list[str]
    """Every email that states the fact, oldest first; the last one holds the answer."""
    split: Literal["train", "test"]


QUESTION_TEMPLATES: dict[str, tuple[str, str]] = {
    # kind: (how the question is phrased, the label of the email line that answers it)
    "flight_confirmation": ("What is the confirmation code for my flight to {entity}?", "Confirmation code"),
    "flight_number": ("What is the flight number of my flight to {entity}?", "Flight number"),
    "flight_date": ("On what date does my flight to {entity} depart?", "Departure date"),
    "flight_time": ("At what time does my flight to {entity} depart?", "Departure time"),
    "meeting_room": ("Which room is the {entity} in?", "Room"),
    "meeting_date": ("On what date is the {entity}?", "Meeting date"),
    "meeting_time": ("At what time does the {entity} start?", "Start time"),
    "invoice_amount": ("How much is due on the invoice from {entity}?", "Amount due"),
    "invoice_due": ("When is the invoice from {entity} due?", "Due date"),
    "invoice_number": ("What is the invoice number of the invoice from {entity}?", "Invoice number"),
    "package_tracking": ("What is the tracking number of my {entity}?", "Tracking number"),
    "package_carrier": ("Which carrier is delivering my {entity}?", "Carrier"),
    "package_eta": ("When is my {entity} expected to arrive?", "Estimated delivery"),
    "reset_code": ("What is the most recent verification code {entity} sent me?", "Verification code"),
    "social_venue": ("Where is {entity}?", "Venue"),
    "social_time": ("At what time does {entity} start?", "Start time"),
}
"""Every question is one of these, with `{entity}` filled in (a city, a meeting, a vendor, ...)."""

# ----- the vocabulary: each entity (a flight's city, a vendor, ...) is used by at most one thread -------------
CITIES = (
    "Lisbon Porto Madrid Seville Barcelona Valencia Bilbao Paris Lyon Marseille Bordeaux Brussels Amsterdam "
    "Rotterdam Copenhagen Stockholm Oslo Helsinki Berlin Munich Hamburg Vienna Prague Budapest Warsaw Krakow "
    "Zurich Geneva Milan Rome Naples Venice Florence Athens Dublin Edinburgh Reykjavik Istanbul Tallinn Riga "
    "Vilnius Zagreb Ljubljana Sofia"
).split()
AIRLINES = [("Skyward Airlines", "SW"), ("Blue Heron Airways", "BH"), ("Polar Air", "PA"), ("Meridian Airlines", "MD")]
PROJECTS = (
    "Atlas Borealis Cobalt Dynamo Ember Falcon Granite Harbor Indigo Juniper Keystone Lighthouse Mosaic Nimbus "
    "Orchid Pioneer Quartz Redwood Sapphire Tundra Umbra Vertex Willow Zephyr Beacon Cascade Delta Evergreen "
    "Fjord Glacier Horizon Ironwood Jasper Kestrel Lotus Meteor Nova Onyx Prism Sequoia"
).split()
MEETING_KINDS = [
    "design review", "budget review", "kickoff", "retrospective", "planning session", "status sync", "demo",
    "roadmap review",
]  # fmt: skip
ROOMS = "Orion Vega Lyra Draco Cygnus Pegasus Andromeda Cassiopeia Perseus Hydra Aquila Carina".split()
COLLEAGUES = [
    "Maria Gonzalez", "Daniel Kim", "Fatima Rahman", "Peter Schmidt", "Olivia Brown", "Arjun Nair",
    "Sarah Mitchell", "Lukas Meyer", "Amara Okeke", "Noah Fischer",
]  # fmt: skip
VENDORS = [
    "Northwind Traders", "Acme Office Supply", "Bluebird Cleaning", "Cedar Web Hosting", "Summit Accounting",
    "Greenleaf Landscaping", "Harborview Insurance", "Pinecrest Utilities", "Lumen Electric", "Quill Print Shop",
    "Riverside Dental", "Silverline Telecom", "Tidewater Plumbing", "Oakridge Property", "Maple Tree Care",
    "Copperfield Consulting", "Fernwood Interiors", "Brightwater Internet", "Stonebridge Security",
    "Clearview Windows", "Redleaf Catering", "Sunrise Bakery Supplies", "Ironclad Storage", "Bluewave Pools",
    "Hilltop Veterinary", "Crescent Moving", "Parkside Garage", "Goldfield Translation", "Willowbrook Childcare",
    "Everbright Solar", "Lakeside Laundry", "Northstar Recruiting", "Pebble Coworking", "Orbit Cloud Storage",
    "Falconer Couriers", "Mapleton Florist",
]  # fmt: skip
SHOPS = ["Parcelly", "HomeNest", "Gadget Barn", "Trailhead Outfitters", "Kitchen Corner"]
ITEMS = [
    "espresso machine", "standing desk", "desk lamp", "office chair", "hiking boots", "rain jacket", "yoga mat",
    "electric kettle", "noise cancelling headphones", "mechanical keyboard", "wireless mouse", "laptop stand",
    "phone case", "water bottle", "backpack", "winter gloves", "cast iron pan", "chef knife", "blender", "toaster",
    "air purifier", "bike helmet", "running shoes", "camping tent", "sleeping bag", "camera tripod",
    "bluetooth speaker", "computer monitor", "coffee grinder", "bookshelf", "wall clock", "picture frame",
    "jigsaw puzzle", "umbrella", "suitcase", "smart watch",
]  # fmt: skip
CARRIERS = ["DHL", "UPS", "FedEx", "DPD", "GLS", "Royal Mail", "Evri"]
SERVICES = (
    "Pixelvault Notewise Trackly Cloudnest Budgetly Fitpulse Mealmate Tunebox Photoloom Taskforge Readwell "
    "Streamly Lingoleap Chatterly Shelfwise Parkwise Codepad Snapcart Homebase Docusafe Ridewell Moneyjar Petpal "
    "Gardenly Sketchly Voxly"
).split()
FRIENDS = [
    "Priya Shah", "Marco Rossi", "Aisha Bello", "Tom Becker", "Ingrid Lindqvist", "Kenji Sato", "Lena Novak",
    "Diego Ramos", "Hannah Cohen", "Omar Haddad", "Julia Kowalski", "Ravi Menon", "Emma Dubois", "Lucas Silva",
    "Nina Petrova", "Sam Okafor", "Chloe Martin", "Felix Wagner", "Maya Patel", "Ivan Horvat", "Zoe Clarke",
    "Ben Adler", "Clara Jensen", "Ethan Brooks", "Yuki Tanaka", "Grace Owusu",
]  # fmt: skip
OCCASIONS = [
    "birthday dinner", "farewell drinks", "housewarming party", "board game night", "book club meetup", "picnic",
    "pub quiz", "brunch", "karaoke night", "movie night",
]  # fmt: skip
VENUES = [
    "Trattoria Lucia", "The Copper Kettle", "The Red Lion", "Blue Door Cafe", "The Fox and Hound",
    "Sakura Ramen Bar", "Casa Miguel", "The Lantern Rooms", "Riverside Tavern", "Olive Tree Bistro",
    "The Crooked Spoon", "Harbour Kitchen", "Bamboo Garden", "Golden Dragon", "The Night Owl", "The Blue Anchor",
]  # fmt: skip
NEWSLETTERS = [  # (sender, subject, body): unrelated mail that still shares words with the questions
    ("The Morning Brief <news@morningbrief.example>", "The Morning Brief: markets, weather and a recipe",
     "Good morning! Markets opened higher, rain is expected by the afternoon, and today's recipe is a quick "
     "lentil soup. Read the full brief on our website."),
    ("Brightline HR <hr@brightline.example>", "Updated holiday calendar",
     "Hi all, the holiday calendar for this year is now on the intranet. Please book time off at least two "
     "weeks ahead and tell your team."),
    ("City Library <loans@citylibrary.example>", "Your library loan is due soon",
     "The book you borrowed is due back next week. You can renew it online or at any branch."),
    ("Data Guild <events@dataguild.example>", "Webinar invitation: forecasting in practice",
     "Join our free webinar on forecasting in practice. The virtual room opens ten minutes before the start "
     "time. Register with the link on our events page."),
    ("Pulse Gym <hello@pulsegym.example>", "New class timetable",
     "Our new class timetable starts on Monday, with extra spin and yoga classes in the evening."),
    ("Harrow Bank <statements@harrowbank.example>", "Your monthly statement is ready",
     "Your monthly statement is ready in online banking. Any card payment due will be taken on the usual day."),
    ("Brightline Facilities <facilities@brightline.example>", "Car park closed this weekend",
     "The office car park is closed on Saturday and Sunday for resurfacing. Meeting rooms stay open."),
    ("Meetup Digest <digest@meetup.example>", "Events near you this week",
     "A pub quiz, a book club and a board game cafe opening: here is what is on near you this week."),
]  # fmt: skip
PROMO_CODES = ["SPRING25", "FLYMORE", "CITYBREAK", "WEEKENDER", "EARLYBIRD"]
CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O or 1/I, as airlines do


# ----- building blocks ---------------------------------------------------------------------------------------------
@dataclass
class _Draft:
    """An email before it has an id: ids are given in date order once every email exists."""

    when: datetime
    sender: str
    subject: str
    body: str
    facts: dict[str, str] = field(default_factory=dict)
    """The `Label: value` lines of the body, which questions ask about."""
    id: str = ""


@dataclass
class _Thread:
    """The emails about one entity (one flight, one invoice, ...) and the kinds of question asked about it."""

    entity: str
    drafts: list[_Draft]
    kinds: list[str]
    split: str = "train"


def _draft(
    when: datetime,
    sender: str,
    subject: str,
    *,
    greeting: str,
    intro: str,
    facts: dict[str, str],
    outro: str,
    signature: str,
) -> _Draft:
    """An email whose body lists `facts` as `Label: value` lines between the prose."""
    fact_lines = "\n".join(f"{label}: {value}" for label, value in facts.items())
    body = f"{greeting}\n\n{intro}\n\n{fact_lines}\n\n{outro}\n\n{signature}"
    return _Draft(when, sender, subject, body, dict(facts))


def _address(name: str, user: str, display: str = "") -> str:
    """`"Skyward Airlines", "bookings"` -> `Skyward Airlines <bookings@skywardairlines.example>`."""
    return f"{display or name} <{user}@{re.sub(r'[^a-z0-9]', '', name.lower())}.example>"


def _person(name: str, domain: str) -> str:
    return f"{name} <{name.lower().replace(' ', '.')}@{domain}>"


def _sent(rng: random.Random, most_days_ago: int, fewest_days_ago: int) -> datetime:
    """A random minute between 07:00 and 21:59, `fewest_days_ago..most_days_ago` days before TODAY."""
    day = TODAY - timedelta(days=rng.randint(fewest_days_ago, most_days_ago))
    return datetime(day.year, day.month, day.day, rng.randint(7, 21), rng.randint(0, 59))


def _later(rng: random.Random, moment: datetime, low: int, high: int) -> datetime:
    """A random minute between 07:00 and 21:59, `low..high` days after `moment` (for a follow-up email)."""
    day = moment.date() + timedelta(days=rng.randint(low, high))
    assert day < TODAY, "a follow-up must be sent before today; send the first email earlier"
    return datetime(day.year, day.month, day.day, rng.randint(7, 21), rng.randint(0, 59))


def _upcoming(rng: random.Random, low: int, high: int, avoid: str = "") -> str:
    """An ISO day `low..high` days after TODAY, other than `avoid`: the questions ask about what lies ahead."""
    while True:
        day = (TODAY + timedelta(days=rng.randint(low, high))).isoformat()
        if day != avoid:
            return day


def _clock(rng: random.Random, first_hour: int, last_hour: int, step: int, avoid: str = "") -> str:
    """A time `HH:MM` on a `step`-minute grid, different from `avoid`."""
    while True:
        clock = f"{rng.randint(first_hour, last_hour):02d}:{rng.randrange(0, 60, step):02d}"
        if clock != avoid:
            return clock


def _unique_code(rng: random.Random, alphabet: str, length: int, used: set[str]) -> str:
    """A random code that no other email uses, so that a code names exactly one email."""
    while True:
        code = "".join(rng.choice(alphabet) for _ in range(length))
        if code not in used:
            used.add(code)
            return code


def _money(rng: random.Random) -> str:
    return f"${rng.randint(2_000, 250_000) / 100:,.2f}"


def _other(rng: random.Random, choices: list[str], current: str) -> str:
    return rng.choice([choice for choice in choices if choice != current])


# ----- threads: the emails about one entity, and the questions they answer ----------------------------------------
def _flight(rng: random.Random, city: str, followup: bool, used: set[str]) -> _Thread:
    """A booking, and for a follow-up a schedule change that restates the code with a new date and time."""
    airline, prefix = rng.choice(AIRLINES)
    sender = _address(airline, "bookings")
    booked = _sent(rng, 90, 10)
    facts = {
        "Confirmation code": _unique_code(rng, CODE_ALPHABET, 6, used),
        "Flight number": f"{prefix}{rng.randint(100, 1999)}",
        "Departure date": _upcoming(rng, 2, 60),
        "Departure time": _clock(rng, 6, 21, 5),
        "Seat": f"{rng.randint(3, 38)}{rng.choice('ABCDEF')}",
    }
    booking = _draft(
        booked,
        sender,
        f"Your flight to {city} is confirmed",
        greeting="Dear Jordan,",
        intro=f"Thank you for booking with {airline}. Your trip from {HOME_CITY} to {city} is confirmed.",
        facts=facts,
        outro="Please be at the airport two hours before departure. You can manage your booking online with your "
        "confirmation code.",
        signature=f"Safe travels,\n{airline}",
    )
    drafts = [booking]
    if followup:
        same_day = rng.random() < 0.5
        new_facts = {
            "Confirmation code": facts["Confirmation code"],
            "Departure date": facts["Departure date"] if same_day else _upcoming(rng, 2, 60, facts["Departure date"]),
            "Departure time": _clock(rng, 6, 21, 5, avoid=facts["Departure time"]),
        }
        change = _draft(
            _later(rng, booked, 1, 8),
            sender,
            f"Schedule change: your flight to {city}",
            greeting="Dear Jordan,",
            intro=f"We are sorry to tell you that your flight from {HOME_CITY} to {city} has been rescheduled. "
            "The new schedule is below; the rest of your booking is unchanged.",
            facts=new_facts,
            outro="If the new time does not suit you, you can change or cancel your booking for free.",
            signature=f"Kind regards,\n{airline}",
        )
        drafts.append(change)
    return _Thread(city, drafts, ["flight_confirmation", "flight_number", "flight_date", "flight_time"])


def _meeting(rng: random.Random, project: str, followup: bool, used: set[str]) -> _Thread:
    """An invitation, and for a follow-up either a room change or a new date and time."""
    topic = f"{project} {rng.choice(MEETING_KINDS)}"
    organizer = rng.choice(COLLEAGUES)
    sender, first = _person(organizer, "brightline.example"), organizer.split()[0]
    sent = _sent(rng, 30, 6)
    facts = {
        "Meeting date": _upcoming(rng, 1, 21),
        "Start time": _clock(rng, 9, 16, 15),
        "Room": rng.choice(ROOMS),
        "Duration": f"{rng.choice([30, 45, 60, 90])} minutes",
    }
    invitation = _draft(
        sent,
        sender,
        f"Invitation: {topic}",
        greeting="Hi Jordan,",
        intro=f"I'd like to hold the {topic} with the team. The details are below; tell me if the slot does not "
        "work for you.",
        facts=facts,
        outro=f"I'll share the agenda for {project} the day before.",
        signature=f"Thanks,\n{first}",
    )
    drafts = [invitation]
    if followup:
        if rng.random() < 0.5:
            subject, intro = f"Room change: {topic}", f"The {topic} has moved to another room. Same day and time."
            new_facts = {"Room": _other(rng, ROOMS, facts["Room"])}
        else:
            subject, intro = f"Rescheduled: {topic}", f"I had to move the {topic}. Here is the new slot, same room."
            new_facts = {
                "Meeting date": _upcoming(rng, 1, 21, avoid=facts["Meeting date"]),
                "Start time": _clock(rng, 9, 16, 15, avoid=facts["Start time"]),
            }
        change = _draft(
            _later(rng, sent, 1, 4),
            sender,
            subject,
            greeting="Hi Jordan,",
            intro=intro,
            facts=new_facts,
            outro="Sorry for the shuffle.",
            signature=first,
        )
        drafts.append(change)
    return _Thread(topic, drafts, ["meeting_room", "meeting_date", "meeting_time"])


def _invoice(rng: random.Random, vendor: str, followup: bool, used: set[str]) -> _Thread:
    """An invoice, and for a follow-up a corrected invoice with a new amount (and maybe a new due date)."""
    sender = _address(vendor, "billing", f"{vendor} Billing")
    sent = _sent(rng, 30, 6)
    number = f"INV-{_unique_code(rng, '0123456789', 5, used)}"
    facts = {"Invoice number": number, "Amount due": _money(rng), "Due date": _upcoming(rng, 3, 30)}
    invoice = _draft(
        sent,
        sender,
        f"Invoice {number} from {vendor}",
        greeting="Hello Jordan Lee,",
        intro=f"Thank you for choosing {vendor}. Your invoice for last month's services is below.",
        facts=facts,
        outro="You can pay by bank transfer or by card from your account page.",
        signature=f"Best regards,\n{vendor}",
    )
    drafts = [invoice]
    if followup:
        new_due = facts["Due date"] if rng.random() < 0.5 else _upcoming(rng, 3, 30, avoid=facts["Due date"])
        correction = _draft(
            _later(rng, sent, 1, 4),
            sender,
            f"Corrected invoice {number} from {vendor}",
            greeting="Hello Jordan Lee,",
            intro=f"We made a mistake on invoice {number}. Please disregard the earlier email; the corrected invoice "
            "is below.",
            facts={"Invoice number": number, "Amount due": _money(rng), "Due date": new_due},
            outro="We apologise for the confusion.",
            signature=f"Best regards,\n{vendor}",
        )
        drafts.append(correction)
    return _Thread(vendor, drafts, ["invoice_amount", "invoice_due", "invoice_number"])


def _package(rng: random.Random, item: str, followup: bool, used: set[str]) -> _Thread:
    """A shipping notice, and for a follow-up a new delivery estimate."""
    shop = rng.choice(SHOPS)
    sender = _address(shop, "orders")
    shipped = _sent(rng, 8, 4)
    facts = {
        "Order number": _unique_code(rng, "0123456789", 8, used),
        "Carrier": rng.choice(CARRIERS),
        "Tracking number": _unique_code(rng, CODE_ALPHABET, 12, used),
        "Estimated delivery": _upcoming(rng, 1, 5),
    }
    notice = _draft(
        shipped,
        sender,
        f"Your {item} has shipped",
        greeting="Hi Jordan,",
        intro=f"Good news: your {item} is on its way. You can follow it with the tracking number below.",
        facts=facts,
        outro="Thank you for shopping with us.",
        signature=f"The {shop} team",
    )
    drafts = [notice]
    if followup:
        update = _draft(
            _later(rng, shipped, 1, 2),
            sender,
            f"Delivery update for your {item}",
            greeting="Hi Jordan,",
            intro=f"{facts['Carrier']} has changed the delivery estimate for your {item}.",
            facts={
                "Tracking number": facts["Tracking number"],
                "Estimated delivery": _upcoming(rng, 1, 6, avoid=facts["Estimated delivery"]),
            },
            outro="We are sorry for the delay.",
            signature=f"The {shop} team",
        )
        drafts.append(update)
    return _Thread(item, drafts, ["package_tracking", "package_carrier", "package_eta"])


def _password_reset(rng: random.Random, service: str, followup: bool, used: set[str]) -> _Thread:
    """A reset code, and for a follow-up a second request minutes later: only the newest code works."""
    requested = _sent(rng, 90, 1)
    moments = [requested] + ([requested + timedelta(minutes=rng.randint(3, 40))] if followup else [])
    drafts = [
        _draft(
            moment,
            _address(service, "no-reply"),
            f"{service} password reset",
            greeting="Hi Jordan,",
            intro=f"We received a request to reset the password of your {service} account. Enter this code:",
            facts={"Verification code": _unique_code(rng, "0123456789", 6, used)},
            outro="The code expires in 15 minutes. If you did not ask for a reset, you can ignore this email.",
            signature=f"The {service} team",
        )
        for moment in moments
    ]
    return _Thread(service, drafts, ["reset_code"])


def _social(rng: random.Random, friend: str, followup: bool, used: set[str]) -> _Thread:
    """A friend's invitation, and for a follow-up a change of venue or of start time."""
    first, occasion = friend.split()[0], rng.choice(OCCASIONS)
    sender = _person(friend, "mailbox.example")
    sent = _sent(rng, 20, 5)
    facts = {"Venue": rng.choice(VENUES), "Day": _upcoming(rng, 1, 14), "Start time": _clock(rng, 11, 20, 30)}
    invitation = _draft(
        sent,
        sender,
        occasion.capitalize(),
        greeting="Hi Jordan!",
        intro=f"I'm organising a {occasion} and would love you to come. The plan:",
        facts=facts,
        outro="Let me know if you can make it!",
        signature=first,
    )
    drafts = [invitation]
    if followup:
        if rng.random() < 0.5:
            new_facts = {"Venue": _other(rng, VENUES, facts["Venue"])}
        else:
            new_facts = {"Start time": _clock(rng, 11, 20, 30, avoid=facts["Start time"])}
        change = _draft(
            _later(rng, sent, 1, 3),
            sender,
            f"Change of plans: {occasion}",
            greeting="Hi Jordan,",
            intro=f"Small change for the {occasion}:",
            facts=new_facts,
            outro="Everything else stays the same. See you there!",
            signature=first,
        )
        drafts.append(change)
    return _Thread(f"{first}'s {occasion}", drafts, ["social_venue", "social_time"])


# ----- distractors: mail that shares words with the questions but states no fact ----------------------------------
def _distractor(rng: random.Random, kind: str, entity: str, when: datetime) -> _Draft:
    """One email of `kind` about `entity` (a city, vendor, item, service or project; unused for newsletters)."""
    if kind == "flight_promo":
        airline, _ = rng.choice(AIRLINES)
        price = rng.randint(39, 199)
        body = (
            f"Spring is here! Fly from {HOME_CITY} to {entity} from just ${price} one way, with flexible "
            f"departure dates and a free seat choice.\n\nUse promo code {rng.choice(PROMO_CODES)} at checkout. "
            f"Book a flight before the end of the month.\n\n{airline}"
        )
        return _Draft(when, _address(airline, "deals", f"{airline} Deals"), f"Fares to {entity} from ${price}", body)
    if kind == "city_guide":
        body = (
            f"Planning a trip to {entity}? Our weekend guide has the best walks, museums and places to eat, "
            "plus tips for getting from the airport to the centre.\n\nHappy travels,\nWanderly"
        )
        return _Draft(when, _address("Wanderly Travel", "hello"), f"48 hours in {entity}: a weekend guide", body)
    if kind == "vendor_news":
        body = (
            f"Thank you for being a customer of {entity}. This month we launched a new account page where "
            f"you can see every invoice and pay by card.\n\nThe team at {entity}"
        )
        return _Draft(when, _address(entity, "news"), f"News from {entity}", body)
    if kind == "shop_promo":
        shop = rng.choice(SHOPS)
        body = (
            f"Our best-rated {entity} is 25% off until Sunday. Free delivery with tracking on every order."
            f"\n\nThe {shop} team"
        )
        return _Draft(when, _address(shop, "deals"), f"Deal of the week: {entity}", body)
    if kind == "security_tips":
        body = (
            f"{entity} will never ask for your password or a verification code by email. Turn on two-step "
            f"sign-in to keep your account safe.\n\nThe {entity} team"
        )
        return _Draft(when, _address(entity, "security"), f"{entity}: tips to keep your account safe", body)
    if kind == "colleague_note":
        colleague = rng.choice(COLLEAGUES)
        body = (
            f"Hi Jordan,\n\nDo you have the latest figures for {entity}? No rush, whenever you have a "
            f"minute.\n\n{colleague.split()[0]}"
        )
        return _Draft(when, _person(colleague, "brightline.example"), f"Quick question about {entity}", body)
    sender, subject, body = rng.choice(NEWSLETTERS)
    return _Draft(when, sender, subject, body)


DISTRACTOR_POOLS = {  # kind: the vocabulary its entity comes from
    "flight_promo": CITIES, "city_guide": CITIES, "vendor_news": VENDORS, "shop_promo": ITEMS,
    "security_tips": SERVICES, "colleague_note": PROJECTS, "newsletter": [""],
}  # fmt: skip


# ----- the whole inbox ------------------------------------------------------------------------------------------------
def _sample(rng: random.Random, pool: list[str], count: int, what: str) -> list[str]:
    if count > len(pool):
        raise ValueError(f"this inbox needs {count} {what} but the vocabulary has {len(pool)}; lower num_emails")
    return rng.sample(pool, count)


def generate_inbox(seed: int = 0, num_emails: int = 300) -> tuple[list[Email], list[Question]]:
    """Generate the inbox and its questions. The same `(seed, num_emails)` always gives the same result.

    About 70% of the emails belong to threads (a booking and maybe its follow-up); the rest are distractors.
    Questions are split ~80/20 into train/test *by thread*, so a test question is about an entity (a flight,
    an invoice, ...) that no train question mentions.
    """
    if not 50 <= num_emails <= 350:
        raise ValueError(f"num_emails must be between 50 and 350 (the vocabulary's size), got {num_emails}")
    rng = random.Random(seed)
    used: set[str] = set()  # every code and number handed out so far, so that each one names one email
    plan = [  # (build a thread, its entities, what they are, how many threads)
        (_flight, CITIES, "cities", num_emails // 10),
        (_meeting, PROJECTS, "projects", num_emails // 10),
        (_invoice, VENDORS, "vendors", num_emails // 10),
        (_package, ITEMS, "items", num_emails // 10),
        (_password_reset, SERVICES, "services", num_emails // 15),
        (_social, FRIENDS, "friends", num_emails // 15),
    ]
    threads: list[_Thread] = []
    for build, vocabulary, what, count in plan:
        names = _sample(rng, vocabulary, count, what)
        followups = set(rng.sample(range(count), round(0.3 * count)))  # 30% of threads get a follow-up email
        threads += [build(rng, name, index in followups, used) for index, name in enumerate(names)]
    for index in rng.sample(range(len(threads)), round(0.2 * len(threads))):
        threads[index].split = "test"

    drafts = [draft for thread in threads for draft in thread.drafts]
    kinds = list(DISTRACTOR_POOLS)
    while len(drafts) < num_emails:
        kind = rng.choice(kinds + ["newsletter"])  # newsletters twice as likely as each other kind
        entity = rng.choice(DISTRACTOR_POOLS[kind])
        drafts.append(_distractor(rng, kind, entity, _sent(rng, 90, 1)))
    if len(drafts) > num_emails:
        raise ValueError(f"the threads alone need {len(drafts)} emails; raise num_emails")

    # Ids follow the date, like the sequence numbers of a mail server; ties keep generation order.
    order = sorted(range(len(drafts)), key=lambda index: (drafts[index].when, index))
    emails = []
    for number, index in enumerate(order, start=1):
        draft = drafts[index]
        draft.id = f"e{number:03d}"
        emails.append(
            Email(
                id=draft.id,
                date=draft.when.strftime("%Y-%m-%d %H:%M"),
                sender=draft.sender,
                to=OWNER,
                subject=draft.subject,
                body=draft.body,
            )
        )

    questions = []
    for thread in threads:
        for kind in thread.kinds:
            template, label = QUESTION_TEMPLATES[kind]
            stating = sorted((draft for draft in thread.drafts if label in draft.facts), key=lambda d: d.when)
            answer = stating[-1].facts[label]  # the latest email wins: it corrects the earlier ones
            questions.append(
                Question(
                    id=f"q{len(questions) + 1:03d}",
                    kind=kind,
                    question=template.format(entity=thread.entity),
                    answer=answer,
                    aliases=answer_aliases(answer),
                    source_ids=[d.id for d in stating],
                    split=thread.split,
                )
            )
    return emails, questions


MONTHS = "January February March April May June July August September October November December".split()


def answer_aliases(answer: str) -> list[str]:
    """Other ways to write `answer` that count as correct: `2025-03-02` -> `March 2`, `2 March`, `Mar 2`, ...;
    `14:30` -> `2:30 pm`; `$1,234.50` -> `1234.50`; `The Red Lion` -> `Red Lion`; `SW123` -> `SW 123`."""
    aliases = []
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", answer):
        day = date.fromisoformat(answer)
        month, short, d = MONTHS[day.month - 1], MONTHS[day.month - 1][:3], day.day
        suffix = "th" if 11 <= d <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(d % 10, "th")
        aliases = [
            f"{month} {d}",
            f"{d} {month}",
            f"{month} {d}{suffix}",
            f"{d}{suffix} {month}",
            f"{short} {d}",
            f"{d} {short}",
        ]
    elif re.fullmatch(r"\d{2}:\d{2}", answer):
        hour, minute = int(answer[:2]), answer[3:]
        twelve = f"{(hour - 1) % 12 + 1}:{minute}"
        aliases = [f"{twelve} {'am' if hour < 12 else 'pm'}", f"{twelve}{'am' if hour < 12 else 'pm'}"]
        if hour < 10:
            aliases.insert(0, f"{hour}:{minute}")
    elif answer.startswith("$"):
        aliases = [answer[1:], answer[1:].replace(",", ""), answer.replace(",", "")]
    elif answer.startswith("The "):
        aliases = [answer[4:]]
    elif re.fullmatch(r"[A-Z]{2}\d+", answer):
        aliases = [f"{answer[:2]} {answer[2:]}"]
    elif re.fullmatch(r"INV-\d+", answer):
        aliases = [answer.replace("-", "")]
    return list(dict.fromkeys(alias for alias in aliases if alias != answer))


# ----- files on disk --------------------------------------------------------------------------------------------------
def write_inbox(
    directory: str | Path = DEFAULT_DATA_DIR, seed: int = 0, num_emails: int = 300
) -> tuple[list[Email], list[Question]]:
    """Generate the inbox and write `emails.jsonl` and `questions.jsonl` (one JSON object a line) to `directory`."""
    emails, questions = generate_inbox(seed, num_emails)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name, records in (("emails.jsonl", emails), ("questions.jsonl", questions)):
        lines = "".join(json.dumps(record.model_dump()) + "\n" for record in records)
        (directory / name).write_text(lines, encoding="utf-8", newline="\n")
    return emails, questions


def practice_inboxes(count: int, root: str | Path) -> list[Path]:
    """`count` other inboxes, from seeds 1 to `count`, written under `root` (once): the same kinds of thread and
    question about other draws of entities and values. A warm start reads its demonstrations across them, so that
    a small model cannot memorise one inbox's answers and has to learn to read them off the emails."""
    directories = []
    for seed in range(1, count + 1):
        directory = Path(root) / f"inbox-seed-{seed}"
        if not (directory / "questions.jsonl").is_file():
            work = directory.with_name(f".{directory.name}-{os.getpid()}")
            write_inbox(work, seed=seed)
            if directory.exists():  # another process wrote it meanwhile
                shutil.rmtree(work)
            else:
                os.replace(work, directory)
        directories.append(directory)
    return directories


def load_inbox(directory: str | Path = DEFAULT_DATA_DIR) -> tuple[list[Email], list[Question]]:
    """Read the files that `write_inbox` wrote, validating every line.

    The files ship inside the package. Should an install lack them (a build without its package data), the default
    inbox is generated in memory instead, which gives the same records as the files.
    """
    directory = Path(directory)
    if directory == DEFAULT_DATA_DIR and not directory.is_dir():
        return generate_inbox()
    records: dict[str, list] = {}
    for name, model in (("emails.jsonl", Email), ("questions.jsonl", Question)):
        path = directory / name
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} is missing; generate the inbox with `{REGENERATE_COMMAND} --out {directory}`"
            )
        records[name] = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            try:
                records[name].append(model.model_validate_json(line))
            except ValidationError as exc:
                raise ValueError(f"{path}:{number} is not a valid {model.__name__}: {exc}") from exc
    return records["emails.jsonl"], records["questions.jsonl"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Generate the inbox_search data files (emails and questions).")
    parser.add_argument("--out", type=Path, default=DEFAULT_DATA_DIR, help="folder for emails.jsonl, questions.jsonl")
    parser.add_argument("--seed", type=int, default=0, help="the random seed (the committed files use 0)")
    parser.add_argument("--num-emails", type=int, default=300, help="inbox size (the committed files use 300)")
    args = parser.parse_args(argv)
    emails, questions = write_inbox(args.out, args.seed, args.num_emails)
    print(f"wrote {len(emails)} emails and {len(questions)} questions to {args.out}")


if __name__ == "__main__":
    main()
