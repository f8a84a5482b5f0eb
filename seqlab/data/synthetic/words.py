"""Data tables for the synthetic office-email generator in `generator.py`: the cast, their organisations,
and the sentence fragments the generator combines. Only module-level tuples; no code runs here.

Templates are `str.format` strings. Slots: {name}/{name2} first names of recipients, {doc}/{doc2}
documents, {verb} a verb from DOC_VERBS, {deadline} a due phrase, {person} someone outside the thread,
{team}, {project}, {meeting}, {day}, {time}, {time2}, {room}, {ref} a reference code such as INV-48213,
{refkind} its noun ("invoice"), {status}, {amount} money, {page}, {count}/{count2} small numbers,
{is}/{does}/{s}/{s2} verb endings that agree with {doc}/{doc2}.
Capitalised slots ({Doc}) are the same value with a capital letter. Addresses use the reserved
`.example` domain (RFC 2606).
"""

DAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
               "October", "November", "December")

# (name, mail domain, phone prefix) of each organisation; index 0 is the company most of the cast works at.
ORGS = (
    ("Harbourline", "harbourline.example", "+44 20 7946"),
    ("Keystone Legal", "keystone-legal.example", "+44 161 496"),
    ("Brightpath Design", "brightpath.example", "+1 415 555"),
    ("Orbit Supply", "orbitsupply.example", "+49 30 901"),
)

# (first, last, org index, job title, favourite sign-off, UTC offset in hours). Each person mostly signs
# off the same way, as people do, which is one of the regularities a model can pick up.
PEOPLE = (
    ("Dana", "Reyes", 0, "Finance Manager", "Best,", 0),
    ("Alex", "Moreno", 0, "Operations Lead", "Thanks,", 0),
    ("Priya", "Shah", 0, "Head of Marketing", "Cheers,", 0),
    ("Tom", "Becker", 0, "Senior Accountant", "Regards,", 0),
    ("Mei", "Lin", 0, "Product Manager", "Best,", 0),
    ("Sam", "Okafor", 0, "IT Support Analyst", "Cheers,", 0),
    ("Laura", "Novak", 0, "HR Business Partner", "Kind regards,", 0),
    ("Jonas", "Lindqvist", 0, "Procurement Officer", "Best regards,", 1),
    ("Zoë", "Martin", 0, "Office Manager", "Thanks!", 0),
    ("Kenji", "Watanabe", 0, "Data Analyst", "Thanks,", 0),
    ("Fatima", "Haddad", 0, "Legal Counsel", "Kind regards,", 0),
    ("Chris", "Doyle", 0, "Sales Director", "Cheers,", 0),
    ("Nina", "Petrova", 0, "Project Coordinator", "Many thanks,", 1),
    ("Omar", "Farouk", 0, "Facilities Manager", "Regards,", 0),
    ("Grace", "Kim", 0, "Marketing Executive", "Best,", 0),
    ("Ben", "Hughes", 0, "Finance Assistant", "Thanks,", 0),
    ("Isabel", "Costa", 0, "Events Manager", "Best wishes,", 1),
    ("Raj", "Patel", 0, "Engineering Manager", "Thanks,", 0),
    ("Hannah", "Weiss", 0, "Executive Assistant", "Many thanks,", 1),
    ("Luca", "Romano", 0, "Account Manager", "Best,", 1),
    ("Aoife", "Brennan", 0, "Payroll Specialist", "Kind regards,", 0),
    ("Marcus", "Greene", 0, "Chief Financial Officer", "Regards,", 0),
    ("Sofia", "Alvarez", 0, "UX Researcher", "Cheers,", 0),
    ("Peter", "Olsen", 0, "Compliance Officer", "Best regards,", 1),
    ("Ruth", "Adeyemi", 0, "Customer Success Lead", "Thanks so much,", 0),
    ("David", "Cohen", 1, "Partner", "Kind regards,", 0),
    ("Elena", "Ruiz", 1, "Associate", "Best regards,", 0),
    ("Martin", "Hale", 1, "Paralegal", "Regards,", 0),
    ("Chloe", "Dupont", 2, "Creative Director", "Cheers,", -8),
    ("Ivan", "Sokolov", 2, "Designer", "Best,", -8),
    ("Maya", "Torres", 2, "Account Director", "Thanks!", -8),
    ("Jamie", "Fraser", 2, "Producer", "Speak soon,", -8),
    ("Katrin", "Vogel", 3, "Key Account Manager", "Best regards,", 1),
    ("Felix", "Braun", 3, "Logistics Coordinator", "Regards,", 1),
    ("Leila", "Nasser", 3, "Customer Service Lead", "Kind regards,", 1),
    ("Owen", "Price", 3, "Sales Engineer", "Thanks,", 1),
)

SIGNOFFS = (
    "Best,", "Thanks,", "Cheers,", "Regards,", "Kind regards,", "Best regards,", "Many thanks,",
    "Best wishes,", "Thanks again,", "All the best,", "Speak soon,", "Thank you,", "Warm regards,",
    "Thanks so much,", "Thanks!",
)

GREETINGS_ONE = ("Hi {name},", "Hello {name},", "Dear {name},", "{name},", "Hey {name},",
                 "Good morning {name},", "Morning {name},", "Hi {name} -", "Afternoon {name},")
GREETINGS_TWO = ("Hi {name} and {name2},", "Hello {name} and {name2},", "Dear {name} and {name2},",
                 "{name}, {name2},", "Hi {name}, hi {name2},")
GREETINGS_MANY = ("Hi all,", "Hello everyone,", "Hi team,", "Dear all,", "Morning all,", "Hi everyone,")

DOCS = (
    "report", "slides", "budget", "invoice", "contract", "minutes", "agenda", "draft", "forecast",
    "timesheet", "spreadsheet", "proposal", "quote", "purchase order", "brief", "summary", "schedule",
    "floor plan", "checklist", "press release", "newsletter", "survey results", "expense claim",
    "receipts", "roadmap", "job description", "offer letter", "statement of work", "renewal form",
    "risk register", "test plan", "release notes", "board pack", "price list", "org chart",
    "seating plan", "training deck", "project plan", "status update", "cover letter", "case study",
    "style guide", "mock-ups", "site photos", "delivery note", "credit note", "audit findings",
)
# Documents named in the plural take plural verbs: the {is}/{s}/{does} slots agree with {doc}, {s2} with {doc2}.
PLURAL_DOCS = ("slides", "minutes", "survey results", "receipts", "release notes", "mock-ups", "site photos",
               "audit findings")
DOC_MODIFIERS = ("", "", "", "", "updated ", "final ", "revised ", "latest ", "signed ", "draft ",
                 "Q3 ", "Q4 ", "monthly ", "quarterly ", "annual ", "new ", "second ", "approved ")
DOC_VERBS = ("send", "share", "forward", "review", "check", "finish", "update", "sign off",
             "look over", "print", "circulate", "upload", "proofread", "approve", "tidy up", "finalise")
VERB_ING = {"send": "sending", "share": "sharing", "forward": "forwarding", "review": "reviewing",
            "check": "checking", "finish": "finishing", "update": "updating", "sign off": "signing off",
            "look over": "looking over", "print": "printing", "circulate": "circulating",
            "upload": "uploading", "proofread": "proofreading", "approve": "approving",
            "tidy up": "tidying up", "finalise": "finalising"}
ORDER_WORDS = ("before", "before", "after", "ahead of", "along with", "together with", "instead of")

REQUESTS = (
    "Could you {verb} the {doc} before the {doc2}?",
    "Could you {verb} the {doc} {deadline}?",
    "Can you {verb} the {doc} {order} the {doc2}?",
    "Would you mind {verb_ing} the {doc} {deadline}?",
    "Please {verb} the {doc} first and then the {doc2}.",
    "I need the {doc} {order} the {doc2}, if that is possible.",
    "When you get a chance, could you {verb} the {doc}?",
    "Could you {verb} the {doc} and copy {person} in?",
    "Is there any chance you could {verb} the {doc} {deadline}?",
    "Can I ask you to {verb} the {doc} {order} the {doc2}?",
    "We still need the {doc} {deadline}; could you {verb} it?",
    "Would you be able to {verb} the {doc} {order} the {doc2}?",
    "Please could you {verb} the {doc} {deadline}.",
    "Any chance of the {doc} {deadline}? {person} wants it {order} the {doc2}.",
    "Could you {verb} the {doc} for {project} {deadline}?",
)
DEADLINES = ("by {day}", "by end of day", "by the end of the week", "before {day}", "before our call on {day}",
             "today if you can", "before the {meeting} on {day}", "first thing on {day}", "by {time} on {day}",
             "this week", "when you can", "before {time} tomorrow", "by lunchtime")

MEETINGS = ("catch-up", "review", "planning session", "one-to-one", "kickoff", "budget meeting", "stand-up",
            "workshop", "interview", "client call", "steering group", "team lunch", "walkthrough",
            "retro", "training session", "board prep", "site visit", "vendor demo")
ROOMS = ("Room 2A", "Room 3B", "Room 4C", "the Oak room", "the Birch room", "the Willow room", "the boardroom",
         "meeting room 5", "meeting room 7", "the fourth-floor kitchen", "the video suite", "the library",
         "the Harbour room", "the small meeting room", "the training room", "the usual room")
TIMES = ("8:30", "9:00", "9:30", "10:00", "10:30", "11:00", "11:15", "11:30", "noon", "12:30", "1 pm",
         "1:30", "2:00", "2 pm", "2:30", "3 pm", "3:15", "3:30", "4:00", "4:30 pm", "5 pm")
MEETING_ASKS = (
    "Can we meet on {day} at {time} in {room}?",
    "Are you free for a {meeting} on {day} at {time}? I can book {room}.",
    "I've booked {room} for the {meeting} on {day} at {time}.",
    "Let's move the {meeting} to {day} at {time}, in {room}.",
    "The {meeting} is on {day} at {time} in {room}.",
    "Would {day} at {time} work for the {meeting}?",
    "Could we push the {meeting} to {time} on {day}?",
    "I've sent an invite for {day}, {time}, {room}.",
    "Shall we do the {meeting} on {day}? {time} in {room} is free.",
    "{person} has asked for a {meeting} on {day} at {time}; {room} is booked.",
)
MEETING_REPLIES = (
    "{day} at {time} works for me.",
    "{time} on {day} is fine; see you in {room}.",
    "I can't make {time}, but {time2} on {day} would work.",
    "Could we do {time2} instead? I have another call at {time}.",
    "{room} it is. I'll bring the {doc}.",
    "Accepted the invite for {day}.",
    "I'm out on {day}, sorry. Could {person} go instead?",
    "That works. I'll let {person} know about the {meeting}.",
)
REQUEST_REPLIES = (
    "Sure, I'll {verb} the {doc} {order} the {doc2}.",
    "No problem, the {doc} will be with you {deadline}.",
    "Will do. I'll {verb} the {doc} {deadline}.",
    "I've just done it: the {doc} {is} in the shared folder.",
    "Done. I also updated the {doc2} while I was at it.",
    "I can {verb} the {doc}, but the {doc2} will take until {day}.",
    "Happy to. Do you need the {doc2} as well?",
    "Thanks for the reminder; I'll {verb} the {doc} today.",
    "The {doc} {is} attached. The {doc2} should follow {deadline}.",
)

REF_KINDS = (("INV", "invoice"), ("PO", "purchase order"), ("TKT", "ticket"), ("CASE", "case"),
             ("REQ", "request"), ("EXP", "expense claim"), ("CON", "contract"), ("QT", "quote"),
             ("ORD", "order"), ("CR", "change request"), ("PRJ", "project"), ("HR", "HR case"))
REF_INTROS = (
    "This is about ref {ref}.",
    "I'm writing about {refkind} {ref}.",
    "Quick question on {refkind} {ref}.",
    "Following up on {refkind} {ref}, which is still open.",
    "Our records show {refkind} {ref} is still open.",
    "The {doc} {is} filed under ref {ref}.",
    "{person} asked me to chase {refkind} {ref}.",
    "Regarding {ref}: the {doc} {does} not match what we agreed.",
    "I've opened {refkind} {ref} for this.",
    "Finance flagged {refkind} {ref} this morning.",
    "This relates to {refkind} {ref} from last month.",
    "Just checking the status of {ref}.",
)
REF_REPEATS = (
    "Please quote {ref} in any reply.",
    "When you reply, please quote {ref}.",
    "Remember to use {ref} as the reference when you file it.",
    "Once more, the reference is {ref}.",
    "If finance asks, it's {ref}.",
    "Please put {ref} in the subject line so it gets matched.",
    "Just mention {ref} and they will find it.",
    "Any payment should reference {ref}.",
    "I've noted {ref} on the {doc} as well.",
    "To be safe, quote {ref} on the {doc2} too.",
    "The system only accepts it with {ref} attached.",
    "So that's {ref}, in case you need it again.",
)

OPENERS = ("Hope you had a good weekend.", "Thanks for your note.", "Quick one from me.",
           "Sorry for the slow reply.", "Hope the trip went well.", "Thanks for yesterday.",
           "Good to see you at the offsite.", "Hope you're well.", "Thanks for the quick turnaround.",
           "As promised, a short update.", "Just a heads-up.", "Thanks for sorting that out so quickly.",
           "I hope this finds you well.", "Welcome back!", "Hope your week is going well.",
           "Apologies for the long email.")
CLOSERS = ("Let me know if you have any questions.", "Thanks in advance.", "Shout if anything is unclear.",
           "Happy to talk it through if easier.", "Let me know what you think.", "Thanks for your help.",
           "I'll keep you posted.", "Speak on {day}.", "Let me know if that doesn't work.",
           "Thanks for bearing with me.", "Give me a call if you need anything.", "Appreciate it.")

PROJECTS = ("Atlas", "Harbour", "the Q3 launch", "the website refresh", "the Lisbon offsite", "the vendor review",
            "the audit", "the CRM migration", "the office move", "the pricing review", "Project Beacon",
            "the spring campaign", "the onboarding revamp", "the warehouse upgrade", "the annual report")
TEAMS = ("finance", "legal", "marketing", "sales", "operations", "HR", "IT", "procurement", "design",
         "engineering", "facilities", "support", "payroll", "events")
STATUSES = ("on track", "running about a week behind", "waiting on legal", "nearly done", "back on schedule",
            "blocked on the {doc}", "over budget", "ahead of plan", "on hold until {day}", "still being scoped")

# Middle-of-email sentences. The generator adds these until the body reaches its target length; the
# short ones at the end let it land on a length exactly.
FILLERS = (
    "{project} is {status}.",
    "The {team} team is waiting for the {doc}.",
    "I spoke to {person} about the {doc} this morning.",
    "{person} will {verb} the {doc} {deadline}.",
    "The numbers in the {doc} still look a bit high to me.",
    "I've attached the {doc} for reference.",
    "We agreed to keep the {doc} to two pages this time.",
    "{person} is out until {day}, so I'm covering.",
    "The {team} team wants to see the {doc} before the {meeting}.",
    "Last time the {doc} went out late and nobody was happy.",
    "There are a couple of open questions on the {doc2}.",
    "I think we can reuse most of last quarter's {doc}.",
    "{person} mentioned the deadline for {project} might move.",
    "The printer on the third floor is broken again, so I'll share it digitally.",
    "I'd rather get the {doc} right than get it out early.",
    "If the {doc} slip{s}, the {doc2} slip{s2} too.",
    "The client asked for the {doc} in PDF this time.",
    "{project} needs sign-off from {team} before anything goes out.",
    "I've left comments in the {doc} for {person}.",
    "The shared drive link should still work.",
    "We can go through the {doc2} at the {meeting}.",
    "I'm in {room} most of {day} if you want to drop by.",
    "Budget-wise we're fine for now.",
    "The {team} numbers came in lower than expected.",
    "Let's not wait for {person} on this one.",
    "I've cleared my calendar on {day} afternoon.",
    "The template for the {doc} is in the usual folder.",
    "The total on the {doc} comes to {amount}.",
    "We're about {amount} under budget on {project} so far.",
    "{person} approved the extra {amount} yesterday.",
    "The supplier wants {amount} up front, which seems steep.",
    "Can you double-check the figure of {amount} on page {page}?",
    "Page {page} of the {doc} has the old logo.",
    "Section {page} needs a line about {project}.",
    "We have {count} people confirmed for the {meeting} so far.",
    "Only {count} of the {count2} forms have come back.",
    "I counted {count} typos in the {doc2}, all small.",
    "The {meeting} ran over by {count} minutes last time.",
    "Parking is limited, so the train is probably easier.",
    "Lunch will be provided for the {meeting}.",
    "The Wi-Fi in {room} has been patchy, so bring a cable.",
    "I'll be working from home on {day}.",
    "The office is closed on {day} for the fire drill.",
    "{person} has a clash, so we may need to reschedule.",
    "I've added the {meeting} to the shared calendar.",
    "The dial-in details are in the invite.",
    "I'd suggest we keep the {meeting} to thirty minutes.",
    "The {team} team asked to be kept in the loop.",
    "{person} and I went through the {doc} line by line.",
    "Most of the feedback on the {doc} was positive.",
    "The main concern is the timeline for {project}.",
    "Legal still has to look at the {doc2}.",
    "We should flag this to {person} before it goes further.",
    "I've chased the supplier twice and heard nothing.",
    "The courier said delivery is expected on {day}.",
    "The old version of the {doc} is still on the intranet.",
    "I've renamed the files so they sort by date.",
    "Please use the new template from now on.",
    "The {doc} need{s} to go to the board on {day}.",
    "It's the same format as the {doc2} we sent in March.",
    "I'm not sure the {doc} add{s} much, to be honest.",
    "If it's easier, I can do the {doc2} myself.",
    "I've asked {person} to join the {meeting} as well.",
    "Feedback from the client was mostly about the {doc2}.",
    "The {team} team has a new starter on {day}.",
    "We still haven't had the signed copy back.",
    "The approval form is with {person}.",
    "This should be the last round of changes.",
    "I'll send the next version once {person} has replied.",
    "The coffee machine in {room} is fixed, finally.",
    "The numbers match what {team} sent last week.",
    "I've highlighted the changes in yellow.",
    "It might be worth a quick call first.",
    "Nothing urgent, but it would help.",
    "{person} already has a copy.",
    "I'll update the tracker afterwards.",
    "No need to reply to everyone.",
    "Keep it brief.",
    "Thanks again.",
    "Much appreciated.",
    "Good news overall.",
    "Sounds good.",
    "Noted.",
    "Thanks.",
)
AMOUNT_SYMBOLS = ("£", "$", "€", "£", "$")
TINY_FILLERS = ("Thanks.", "Noted.", "Great.", "Sounds good.", "Much appreciated.", "Thanks again.")

SUBJECTS = ("{Doc} before the {doc2}", "{Doc} for {project}", "{Meeting} on {weekday}", "{Refkind} {ref}",
            "Quick question about {ref}", "{project}: next steps", "About {refkind} {ref}", "{Doc} {deadline}",
            "Update on {project}", "Need the {doc}", "{Meeting} {weekday}?", "{Doc} and {doc2}",
            "Chasing {refkind} {ref}", "Room for the {meeting}", "Action needed: {doc}")
